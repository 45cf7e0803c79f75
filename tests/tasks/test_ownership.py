"""Several managers on one store: backends kept apart, owners and leases, takeovers, one notice.

Each test here is a defect of issue 9 on the code before the restructuring (see the docstrings).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from asyncagents.tasks import (
    InProcessBackend,
    PromptRequest,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskNotFoundError,
    TaskStatus,
)
from asyncagents.tasks.backend import JSON
from parent_notices import notices_in
from polling import until
from tasks_script import Script


def _config(**kw: object) -> TaskManagerConfig:
    base: dict[str, object] = {"poll_interval": 0.2, "wake": "never", "notice_interval": 0.1}
    return TaskManagerConfig.model_validate({**base, **kw})


async def _kill(manager: TaskManager) -> None:
    """Stop a manager as kill -9 would: nothing more runs, its lease is NOT dropped."""
    await manager.leases.stop(drop_lease=False)
    await manager.watcher.stop()
    await manager.courier.stop()
    await manager.jobs.cancel_all()
    manager._started = False


async def test_two_backends_on_one_file_never_touch_each_others_tasks(tmp_path: Path) -> None:
    """Defect 1: the second manager re-attached the first one's task, its server answered 404
    for that session, and the task ended in error (and `clear` removed it)."""
    path = tmp_path / "shared.sqlite3"
    script_a, script_b = Script(), Script()
    backend_a, backend_b = InProcessBackend(script_a), InProcessBackend(script_b)
    parent = str((await backend_a.create_session())["id"])
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    async with TaskManager(backend_a, store_a, _config(backend_name="server-a")) as a:
        task = await a.task(parent, "[hold] mine", "explore", "a's task")
        await until(lambda: bool(script_a.seen))
        async with TaskManager(backend_b, store_b, _config(backend_name="server-b")) as b:
            b.reconcile()
            await asyncio.sleep(0.6)  # three reconcile passes of b
            assert await b.list(parent) == []
            with pytest.raises(TaskNotFoundError):
                await b.output(task.id)
            assert await b.clear(parent) == []
            assert len(b.registry) == 0
        assert (await a.output(task.id)).task.status is TaskStatus.RUNNING
        script_a.release.set()
        out = await a.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED and out.task.backend == "server-a"
        await until(lambda: _count(backend_a, parent, 1))
    await store_a.close()
    await store_b.close()


class _SlowNotices(InProcessBackend):
    """A parent takes 20 ms to store a notice, as a server does: deliveries overlap."""

    async def prompt(self, session_id: str, request: PromptRequest) -> JSON:
        if request.no_reply:
            await asyncio.sleep(0.02)
        return await super().prompt(session_id, request)


async def test_two_managers_of_one_backend_deliver_every_notice_once(tmp_path: Path) -> None:
    """Defect 2: two managers on one file and one server delivered notices twice (read,
    prompt, delete, with no claim between them): 120 for 60 tasks before the claims."""
    path = tmp_path / "shared.sqlite3"
    backend = _SlowNotices(Script())
    parents = [str((await backend.create_session())["id"]) for _ in range(3)]
    stores = [SQLiteTaskStore(path), SQLiteTaskStore(path)]
    config = _config(notice_interval=0.02)
    async with (
        TaskManager(backend, stores[0], config) as a,
        TaskManager(backend, stores[1], config) as b,
    ):
        assert a.instance_id != b.instance_id
        tasks = await asyncio.gather(
            *(
                (a, b)[i % 2].task(parents[i % 3], f"[sleep] job {i}", "explore", f"job {i}")
                for i in range(60)
            )
        )
        for task in tasks:
            await a.output(task.id, block=True, timeout=20)
        await until(lambda: _all_delivered(a), timeout=20, what="every notice delivered")
        await asyncio.sleep(0.5)
    for store in stores:
        await store.close()
    received = [n for p in parents for n in await notices_in(backend, p)]
    assert len(received) == 60
    for task in tasks:
        assert sum(f"Background task `{task.id}` completed" in n for n in received) == 1


async def test_a_dead_owners_tasks_are_taken_over_and_finished(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    script = Script()
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    a = TaskManager(backend, store_a, _config(lease_ttl=0.6))
    await a.start()
    tasks = [await a.task(parent, f"[hold] job {i}", "explore", f"job {i}") for i in range(5)]
    await until(lambda: len(script.seen) == 5)
    await _kill(a)
    async with TaskManager(backend, store_b, _config(lease_ttl=0.6)) as b:
        assert b.leases.taken_over == 0  # a's lease still lives
        await until(lambda: b.leases.taken_over == 5, timeout=5, what="takeover")
        assert len(b.registry) == 5
        for task in tasks:
            assert (await b.output(task.id)).task.owner == b.instance_id
        script.release.set()
        for task in tasks:
            out = await b.output(task.id, block=True, timeout=5)
            assert out.task.status is TaskStatus.COMPLETED
        await until(lambda: _count(backend, parent, 5))
        await asyncio.sleep(0.3)
    assert len(await notices_in(backend, parent)) == 5
    await store_a.close()
    await store_b.close()


async def test_close_hands_the_tasks_over_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    script = Script()
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    # a lease far longer than the test: only the dropped lease lets b take over
    async with TaskManager(backend, store_b, _config(lease_ttl=1.5)) as b:
        a = TaskManager(backend, store_a, _config(lease_ttl=600))
        await a.start()
        task = await a.task(parent, "[hold] job", "explore", "handed over")
        await until(lambda: bool(script.seen))
        await a.close()
        await until(lambda: b.leases.taken_over == 1, timeout=3, what="takeover after close")
        script.release.set()
        out = await b.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED and out.task.owner == b.instance_id
    await store_a.close()
    await store_b.close()


async def test_any_manager_of_the_backend_may_cancel_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    script = Script()
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    async with (
        TaskManager(backend, store_a, _config()) as a,
        TaskManager(backend, store_b, _config()) as b,
    ):
        running = await a.task(parent, "[hold] long", "explore", "cancel from b")
        await until(lambda: bool(script.seen))
        cancelled = await b.cancel(running.id)
        assert cancelled.status is TaskStatus.CANCELLED
        assert cancelled.session_id and cancelled.session_id not in await backend.status()
        await until(lambda: a.registry.get(running.id) is None, what="a stops following it")

        script.release.set()
        done = await a.task(parent, "quick", "explore", "resume from b")
        await a.output(done.id, block=True, timeout=5)
        resumed = await b.task(parent, "more", resume=done.id)
        assert resumed.owner == b.instance_id and b.registry.get(done.id) is not None
        out = await a.output(done.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED and out.task.result == "Reply to: more"
    await store_a.close()
    await store_b.close()


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def _all_delivered(manager: TaskManager) -> bool:
    return not await manager.store.notices()
