"""Four worker processes on one store (a SQLite file, or one PostgreSQL database) and one fake
OpenCode server: 500 tasks, every parent getting tasks from every worker, so the workers race
for the same parents' notices. None is lost, each is recorded ended by exactly one worker (its
owner: live workers never take each other's tasks), and each notice reaches its parent exactly
once (counted in the prompts the server received)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from asyncagents.tasks import TaskStatus
from fake_opencode import FakeOpenCodeProcess
from polling import until
from workers_support import (
    WorkerProcess,
    Workers,
    all_ids,
    count_notices,
    make_parents,
    open_store,
    store_args,
    tasks_by_id,
)

WORKERS = 4
TASKS = 500
PARENTS = 20
PROMPT = "[tool] job {i} of {worker}"
OPTIONS = (
    "--lease-ttl", "10", "--poll-interval", "2", "--notice-interval", "0.5",
    "--notice-claim-ttl", "30", "--notice-retry-initial", "0.2", "--stats-interval", "5",
)  # fmt: skip
#: the whole run (launch, completion, delivery) on a loaded 2-core machine
RUN_TIMEOUT = 240.0


async def test_four_workers_500_tasks_none_lost_notices_once(
    fake_server: FakeOpenCodeProcess, store_kind: str, store_where: str, tmp_path: Path
) -> None:
    parents = make_parents(fake_server.url, PARENTS)
    with Workers() as workers:
        workers.add_all(
            [
                WorkerProcess(
                    fake_server.url,
                    store_args(store_kind, store_where),
                    *OPTIONS,
                    log_dir=tmp_path / f"w{n}",
                )
                for n in range(WORKERS)
            ]
        )
        for worker in workers.all:
            worker.launch(TASKS // WORKERS, parents, PROMPT)
        for worker in workers.all:
            line = worker.launched(timeout=RUN_TIMEOUT)
            assert line["errors"] == [] and line["count"] == TASKS // WORKERS
        ids = all_ids(workers.all)
        assert len(set(ids)) == TASKS
        launched_by = {
            tid: worker.instance_id for worker in workers.all for tid in worker.of("launched")[0]
            ["task_ids"]
        }  # fmt: skip

        async with open_store(store_kind, store_where) as store:

            async def all_done() -> bool:
                tasks = await tasks_by_id(store)
                if any(t.status.active for t in tasks.values()):
                    return False
                if await store.notices(backend=fake_server.url):
                    return False
                return sum(count_notices(fake_server.url, parents).by_notice.values()) >= TASKS

            await until(all_done, RUN_TIMEOUT, "every task ended and its notice sent", every=1.0)
            tasks = await tasks_by_id(store)

        # none lost, none added, each completed with its own reply, on this backend
        assert sorted(tasks) == sorted(ids)
        for task in tasks.values():
            assert task.status is TaskStatus.COMPLETED, (task.id, task.status, task.error)
            assert re.fullmatch(r"\[tool\] job \d+ of \d+", task.prompt)
            assert task.result == f"Reply to: {task.prompt}"
            assert task.backend == fake_server.url
            # live workers keep their own tasks: no takeover while every lease is renewed
            assert task.owner == launched_by[task.id]

        # each end recorded by exactly one worker, the one that launched it
        ended = Counter(
            e["task_id"] for w in workers.all for e in w.of("task") if e["kind"] == "task.completed"
        )
        assert ended == Counter(ids)
        for worker in workers.all:
            assert {e["task_id"] for e in worker.of("task")} == {
                t for t, owner in launched_by.items() if owner == worker.instance_id
            }

        # every notice exactly once, to its own parent
        got = count_notices(fake_server.url, parents)
        assert got.doubled == {}
        assert len(got.by_notice) == TASKS
        assert got.by_task == Counter(ids)
        assert all(got.parent_of_task[t] == tasks[t].parent_session_id for t in ids)

        # a clean stop on SIGTERM
        for worker in workers.all:
            assert worker.terminate() == 0, worker.stderr_tail()
            assert worker.of("stopped") == [{"event": "stopped", "reason": "SIGTERM"}]
            assert worker.of("fatal") == []
            # its last stats line (printed at the stop): it took over nothing
            assert worker.of("stats")[-1]["taken_over"] == 0
