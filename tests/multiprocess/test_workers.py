"""Four worker processes on one store (SQLite file, PostgreSQL database), against a fake
OpenCode server in its own process: nothing lost, every notice exactly once, backends kept
apart, and a killed worker's tasks taken over and finished within the lease time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncagents.tasks import OpenCodeBackend, TaskStatus, TaskStore
from fake_opencode import FakeOpenCodeProcess
from polling import until
from workers import Worker, all_ended, create_store, notice_counts, open_store, tasks_by_id

WORKERS = 4
TASKS = 500
PARENTS = 10


@pytest.fixture
def own_fake_server() -> Iterator[FakeOpenCodeProcess]:
    """A server of the test's own (``release()`` lets held turns go for good)."""
    with FakeOpenCodeProcess(heartbeat=2.0) as server:
        yield server


async def _parents(backend: OpenCodeBackend, n: int) -> list[str]:
    return [str((await backend.create_session(title=f"parent {i}"))["id"]) for i in range(n)]


async def test_four_workers_500_tasks_none_lost_every_notice_once(
    fake_server: FakeOpenCodeProcess, store_spec: str, workers: list[Worker]
) -> None:
    async with OpenCodeBackend(fake_server.url) as backend:
        parents = await _parents(backend, PARENTS)
        for w in range(WORKERS):
            workers.append(
                Worker(
                    fake_server.url,
                    store_spec,
                    f"worker-{w}",
                    parents=",".join(parents),
                    count=TASKS // WORKERS,
                    prompt=f"w{w} job {{i}}",
                )
            )
        launched = [i for w in workers for i in w.wait_launched()]
        assert len(set(launched)) == TASKS
        store = open_store(store_spec)
        try:
            await until(lambda: all_ended(store, launched), timeout=300, what="all ended", every=1)
            tasks = await tasks_by_id(store)
            assert all(tasks[i].status is TaskStatus.COMPLETED for i in launched)
            assert {tasks[i].result for i in launched} == {
                f"Reply to: w{w} job {i}" for w in range(WORKERS) for i in range(TASKS // WORKERS)
            }
            await until(lambda: _no_notices(store), timeout=120, what="notices out", every=0.5)
            await asyncio.sleep(2.0)  # a few notice passes later: still one each
            counts = await notice_counts(backend, parents)
            assert sorted(counts) == sorted(launched)
            assert set(counts.values()) == {1}
        finally:
            await store.close()
    assert [w.stop() for w in workers] == [0] * WORKERS


async def test_two_backends_on_one_file_never_touch_each_other(
    fake_server: FakeOpenCodeProcess,
    own_fake_server: FakeOpenCodeProcess,
    tmp_path: Path,
    workers: list[Worker],
) -> None:
    spec = f"sqlite:{tmp_path}/shared.sqlite3"
    await create_store(spec)
    servers = (fake_server, own_fake_server)
    async with (
        OpenCodeBackend(fake_server.url) as backend_a,
        OpenCodeBackend(own_fake_server.url) as backend_b,
    ):
        parents = [await _parents(backend_a, 2), await _parents(backend_b, 2)]
        for n in range(2):
            workers.append(
                Worker(
                    servers[n].url,
                    spec,
                    f"backend-{n}",
                    parents=",".join(parents[n]),
                    count=20,
                    prompt="[sleep:1] job {i}",
                    poll=0.3,
                )
            )
            workers[-1].wait_launched()  # b starts while a's tasks run
        store = open_store(spec)
        try:
            ids = workers[0].launched + workers[1].launched
            await until(lambda: all_ended(store, ids), timeout=120, what="all ended", every=0.5)
            tasks = await tasks_by_id(store)
            for n, worker in enumerate(workers):
                for task_id in worker.launched:
                    task = tasks[task_id]
                    assert task.status is TaskStatus.COMPLETED, task.error
                    assert task.backend == servers[n].url and task.owner == worker.instance_id
            await until(lambda: _no_notices(store), timeout=60, what="notices out", every=0.5)
            await asyncio.sleep(1.0)
            for n, backend in enumerate((backend_a, backend_b)):
                counts = await notice_counts(backend, parents[n])
                assert sorted(counts) == sorted(workers[n].launched)
                assert set(counts.values()) == {1}
        finally:
            await store.close()


async def test_a_killed_workers_tasks_are_taken_over_within_the_lease_time(
    own_fake_server: FakeOpenCodeProcess, store_spec: str, workers: list[Worker]
) -> None:
    lease = 3.0
    url = own_fake_server.url
    async with OpenCodeBackend(url) as backend:
        parents = await _parents(backend, 2)
        for n in range(WORKERS - 1):
            workers.append(Worker(url, store_spec, f"heir-{n}", lease_ttl=lease, poll=0.5))
        victim = Worker(
            url,
            store_spec,
            "victim",
            parents=",".join(parents),
            count=20,
            prompt="[hold] {i}",
            lease_ttl=lease,
        )
        workers.append(victim)
        ids = victim.wait_launched()
        store = open_store(store_spec)
        try:
            await until(lambda: _all_started(store, ids), timeout=60, what="turns started")
            victim.kill()
            killed_at = time.monotonic()
            own_fake_server.release()
            await until(lambda: all_ended(store, ids), timeout=60, what="taken over", every=0.2)
            took = time.monotonic() - killed_at
            tasks = await tasks_by_id(store)
            heirs = {w.instance_id for w in workers if w is not victim}
            assert all(tasks[i].status is TaskStatus.COMPLETED for i in ids)
            assert all(tasks[i].owner in heirs for i in ids)
            # lease time, one takeover interval, one check; generous on a loaded machine
            assert took < lease + lease / 3 + 10, took
            await until(lambda: _no_notices(store), timeout=60, what="notices out", every=0.5)
            await asyncio.sleep(1.0)
            counts = await notice_counts(backend, parents)
            assert sorted(counts) == sorted(ids) and set(counts.values()) == {1}
        finally:
            await store.close()


async def _no_notices(store: TaskStore) -> bool:
    return not await store.notices()


async def _all_started(store: TaskStore, ids: list[str]) -> bool:
    tasks = {t.id: t for t in await store.list_tasks()}
    return all(i in tasks and tasks[i].turn_started_at is not None for i in ids)
