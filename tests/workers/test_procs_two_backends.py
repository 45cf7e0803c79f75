"""Two managers with different OpenCode servers on one SQLite file (the incident of issue 9: the
second one's server answered 404 for the first one's sessions, and the tasks ended in error and
were cleared). Each works only for its own backend: a manager that starts while the other's
tasks run does not adopt them, a kill -9 of one leaves its tasks to a manager of ITS backend (not
to the other), and every task completes on its own server, its notice sent there once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from asyncagents.tasks import TaskStatus
from fake_opencode import FakeOpenCodeProcess
from polling import until
from workers_support import (
    WorkerProcess,
    Workers,
    count_notices,
    make_parents,
    open_store,
    quick_options,
    session_exists,
    store_args,
    tasks_by_id,
)

LEASE_TTL = 3.0
OPTIONS = quick_options(LEASE_TTL)
HELD = 20
QUICK = 20


async def test_two_backends_on_one_file_never_touch_each_other(
    fake_server: FakeOpenCodeProcess, tmp_path: Path
) -> None:
    db = str(tmp_path / "tasks.sqlite3")
    async with open_store("sqlite", db):
        pass  # the schema exists before the workers start (see workers_support.create_store)
    one = fake_server
    with FakeOpenCodeProcess(heartbeat=2.0) as two, Workers() as workers:
        parents_one, parents_two = make_parents(one.url, 3), make_parents(two.url, 3)
        w1 = workers.add(WorkerProcess(one.url, store_args("sqlite", db), *OPTIONS,
                                       log_dir=tmp_path / "w1"))  # fmt: skip
        w1.launch(HELD, parents_one, "[hold] one {i}")
        held = w1.launched()["task_ids"]
        assert len(held) == HELD

        async with open_store("sqlite", db) as store:

            async def held_started() -> bool:
                tasks = await tasks_by_id(store)
                return all(tasks[t].turn_started_at is not None for t in held)

            await until(held_started, 60, "server one's turns started", every=0.2)

            # the second manager starts while the first one's tasks run, on its own server
            w2 = workers.add(WorkerProcess(two.url, store_args("sqlite", db), *OPTIONS,
                                           log_dir=tmp_path / "w2"))  # fmt: skip
            assert w2.ready["backend_name"] == two.url != w1.ready["backend_name"] == one.url
            w2.launch(QUICK, parents_two, "[tool] two {i}")
            quick = w2.launched()["task_ids"]
            assert len(quick) == QUICK

            async def two_done() -> bool:
                tasks = await tasks_by_id(store)
                return all(tasks[t].status is TaskStatus.COMPLETED for t in quick) and (
                    sum(count_notices(two.url, parents_two).by_notice.values()) >= QUICK
                )

            await until(two_done, 60, "server two's tasks completed and told", every=0.3)

            # server one's manager dies; server two's manager must not adopt its tasks
            w1.kill()
            killed_at = time.monotonic()
            await asyncio.sleep(3 * LEASE_TTL)
            tasks = await tasks_by_id(store)
            for t in held:
                assert tasks[t].status is TaskStatus.RUNNING, (t, tasks[t].status, tasks[t].error)
                assert tasks[t].owner == w1.instance_id
            assert w2.of("stats")[-1]["taken_over"] == 0

            # a new manager of server one takes them over and finishes them there
            w1b = workers.add(WorkerProcess(one.url, store_args("sqlite", db), *OPTIONS,
                                            log_dir=tmp_path / "w1b"))  # fmt: skip

            async def adopted() -> bool:
                now = await tasks_by_id(store)
                return all(now[t].owner == w1b.instance_id for t in held)

            await until(adopted, 30, "server one's tasks taken over by w1b", every=0.2)
            one.release()

            async def one_done() -> bool:
                now = await tasks_by_id(store)
                return all(now[t].status is TaskStatus.COMPLETED for t in held) and (
                    sum(count_notices(one.url, parents_one).by_notice.values()) >= HELD
                )

            await until(one_done, 60, "server one's tasks completed and told", every=0.3)
            tasks = await tasks_by_id(store)
            print(
                f"w1's tasks adopted by w1b and done {time.monotonic() - killed_at:.1f}s after kill"
            )

        # none errored, none cleared: both sets whole, each on its own server
        assert sorted(tasks) == sorted(held + quick)
        for ids, server, other, mine in (
            (held, one, two, w1b.instance_id),
            (quick, two, one, w2.instance_id),
        ):
            for t in ids:
                task = tasks[t]
                assert task.status is TaskStatus.COMPLETED, (t, task.status, task.error)
                assert task.result == f"Reply to: {task.prompt}"
                assert task.backend == server.url
                assert task.owner == mine
                assert task.session_id is not None
                assert session_exists(server.url, task.session_id)
                assert not session_exists(other.url, task.session_id)
        # server two's manager never recorded anything of server one's tasks, and back
        assert {e["task_id"] for e in w2.of("task")} == set(quick)
        assert {e["task_id"] for e in w1b.of("task")} == set(held)

        got_one, got_two = count_notices(one.url, parents_one), count_notices(two.url, parents_two)
        assert got_one.doubled == {} and got_two.doubled == {}
        assert got_one.by_task == Counter(held)
        assert got_two.by_task == Counter(quick)

        for w in (w2, w1b):
            assert w.terminate() == 0, w.stderr_tail()
        assert w2.of("stats")[-1]["taken_over"] == 0
        assert w1b.of("stats")[-1]["taken_over"] == HELD
