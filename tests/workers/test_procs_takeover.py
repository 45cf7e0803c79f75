"""kill -9 of a worker while its tasks still run: the other workers of the backend take them over
once its lease has expired (within the lease time, plus the renewal interval and a margin for a
loaded machine), follow them to their end, and every notice reaches its parent exactly once."""

from __future__ import annotations

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
    store_args,
    tasks_by_id,
)

LEASE_TTL = 4.0
#: on top of the lease: one renewal interval (lease/3), a check, and a loaded 2-core machine
MARGIN = 10.0
HELD = 30
QUICK = 10
OPTIONS = quick_options(LEASE_TTL)


async def test_killed_worker_tasks_taken_over_and_finished(
    fake_server: FakeOpenCodeProcess, store_kind: str, store_where: str, tmp_path: Path
) -> None:
    url = fake_server.url
    parents = make_parents(url, 4)
    where = store_args(store_kind, store_where)
    with Workers() as workers:
        victim, b, c = (
            workers.add(WorkerProcess(url, where, *OPTIONS, log_dir=tmp_path / name))
            for name in ("victim", "b", "c")
        )
        # quick tasks everywhere (notices in flight around the kill), held ones on the victim
        quick = [w.launch(QUICK, parents, "[tool] quick {i} of {worker}") for w in (victim, b, c)]
        for w, before in zip((victim, b, c), quick, strict=False):
            assert w.launched(before)["errors"] == []
        victim.launch(HELD, parents, "[hold] held {i}")
        held_line = victim.launched(1)
        assert held_line["errors"] == []
        held = held_line["task_ids"]
        all_ids = [t for w in workers.all for line in w.of("launched") for t in line["task_ids"]]
        assert len(set(all_ids)) == 3 * QUICK + HELD

        async with open_store(store_kind, store_where) as store:
            victim_quick = victim.of("launched")[0]["task_ids"]

            async def held_started() -> bool:
                tasks = await tasks_by_id(store)
                return all(tasks[t].turn_started_at is not None for t in held) and not any(
                    tasks[t].status.active for t in victim_quick
                )

            # the prompts were sent: a takeover follows them (it does not fail them unstarted);
            # the victim's quick tasks ended (their notices may still be pending or claimed)
            await until(held_started, 60, "the held tasks' turns started", every=0.2)
            before_kill = await tasks_by_id(store)
            assert all(before_kill[t].status is TaskStatus.RUNNING for t in held)
            assert all(before_kill[t].owner == victim.instance_id for t in held)

            killed_at = time.monotonic()
            victim.kill()
            survivors = {b.instance_id, c.instance_id}

            async def taken_over() -> bool:
                tasks = await tasks_by_id(store)
                return all(tasks[t].owner in survivors for t in held)

            await until(taken_over, LEASE_TTL + MARGIN, "the held tasks taken over", every=0.1)
            takeover = time.monotonic() - killed_at
            tasks = await tasks_by_id(store)
            # not before the lease expired: it ran from the victim's last renewal (at most
            # lease/3 before the kill, plus a loaded loop's delay)
            assert takeover >= LEASE_TTL - LEASE_TTL / 3 - 1.0, takeover
            # still running when taken over: the new owner has to follow them to the end
            assert all(tasks[t].status is TaskStatus.RUNNING for t in held)

            fake_server.release()
            released_at = time.monotonic()

            async def held_completed() -> bool:
                now = await tasks_by_id(store)
                return all(now[t].status is TaskStatus.COMPLETED for t in held)

            # finished within the lease time (+ margin) of the kill, by their new owners
            await until(held_completed, LEASE_TTL + MARGIN, "the held tasks completed", every=0.1)
            assert time.monotonic() - killed_at <= LEASE_TTL + MARGIN + 1.0

            async def all_done() -> bool:
                now = await tasks_by_id(store)
                if any(t.status.active for t in now.values()):
                    return False
                if await store.notices(backend=url):
                    return False
                total = sum(count_notices(url, parents).by_notice.values())
                return total >= len(all_ids)

            await until(all_done, LEASE_TTL + MARGIN + 20, "all ended, notices sent", every=0.3)
            finished = time.monotonic() - released_at
            tasks = await tasks_by_id(store)

        assert sorted(tasks) == sorted(all_ids)
        for task in tasks.values():
            assert task.status is TaskStatus.COMPLETED, (task.id, task.status, task.error)
            assert task.result == f"Reply to: {task.prompt}"
        assert {tasks[t].owner for t in held} <= survivors
        # the survivors' own tasks never changed hands
        for w in (b, c):
            own = w.of("launched")[0]["task_ids"]
            assert all(tasks[t].owner == w.instance_id for t in own)

        # each held task ended once, recorded by the survivor that took it over
        ended = Counter(
            e["task_id"] for w in (b, c) for e in w.of("task") if e["kind"] == "task.completed"
        )
        assert all(ended[t] == 1 for t in held)
        for w in (b, c):
            mine = {t for t in held if tasks[t].owner == w.instance_id}
            assert {e["task_id"] for e in w.of("task")} >= mine

        got = count_notices(url, parents)
        assert got.doubled == {}
        assert got.by_task == Counter(all_ids)

        for w in (b, c):
            assert w.terminate() == 0, w.stderr_tail()
        assert sum(w.of("stats")[-1]["taken_over"] for w in (b, c)) == HELD
        print(
            f"{store_kind}: takeover {takeover:.2f}s after kill -9 (lease {LEASE_TTL:g}s), "
            f"all ended and told {finished:.2f}s after the release"
        )
