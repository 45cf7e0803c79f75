"""Faults lose nothing and leak nothing: failing store writes, and memory after many tasks."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    InProcessTurn,
    StoreError,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from flaky_store import FlakyStore
from parent_notices import notices_in
from polling import session_of, until
from tasks_script import Script


def _config(**kw: object) -> TaskManagerConfig:
    base: dict[str, object] = {
        "poll_interval": 0.2,
        "wake": "never",
        "store_retry_initial": 0.01,
        "max_running": 100,  # every task runs at once: the queue is not what is tested here
    }
    return TaskManagerConfig.model_validate({**base, **kw})


async def test_a_failed_insert_raises_store_error_and_leaves_no_session(script: Script) -> None:
    """Defect 6: the child session was created before the task was stored and left behind."""
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store = FlakyStore()
    async with TaskManager(backend, store, _config()) as manager:
        store.fail_inserts = 3
        for _ in range(3):
            with pytest.raises(StoreError, match="disk full"):
                await manager.task(parent, "x", "explore", "no space")
        assert backend.session_ids() == [parent]
        assert await manager.list(parent) == []
        task = await manager.task(parent, "x", "explore", "space again")
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED


async def test_failing_background_writes_are_retried_and_no_task_stays_running(
    script: Script,
) -> None:
    """Defect 6: a write that failed once left its task `running` for ever."""
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store = FlakyStore()
    async with TaskManager(backend, store, _config()) as manager:
        tasks = [await manager.task(parent, f"[hold] {i}", "explore", f"t{i}") for i in range(20)]
        await until(lambda: len(script.seen) == 20)
        store.fail_updates = 25  # the next 25 writes fail: starts, ends, in any order
        script.release.set()
        for task in tasks:
            out = await manager.output(task.id, block=True, timeout=10)
            assert out.task.status is TaskStatus.COMPLETED, out.task.error
        assert store.failed == 25
        await until(lambda: _count(backend, parent, 20), timeout=10)


async def test_a_store_down_longer_than_the_retries_is_caught_up_by_the_checks(
    script: Script,
) -> None:
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store = FlakyStore()
    config = _config(store_retry_attempts=2)
    async with TaskManager(backend, store, config) as manager:
        task = await manager.task(parent, "[hold] x", "explore", "store down")
        await until(lambda: bool(script.seen))
        await asyncio.sleep(0.1)
        store.fail_updates = -1
        script.release.set()
        await asyncio.sleep(0.8)  # several checks, every write failing
        assert (await store.get(task.id)) is not None
        assert (await store.get(task.id)).status is TaskStatus.RUNNING  # type: ignore[union-attr]
        store.fail_updates = 0
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED
        await until(lambda: _count(backend, parent, 1))


async def _cycle(manager: TaskManager, backend: InProcessBackend, n: int) -> None:
    parent = str((await backend.create_session())["id"])
    tasks = await asyncio.gather(
        *(manager.task(parent, f"job {i}", "explore", f"j{i}") for i in range(n))
    )
    for task in tasks:
        await manager.output(task.id, block=True, timeout=10)
    await until(lambda: _none_pending(manager), timeout=10)
    await manager.clear(parent)
    await backend.delete_session(parent)
    await manager.wait_idle()


async def test_memory_returns_to_its_baseline_after_launch_and_clear_cycles() -> None:
    """Defect 7: one lock per task forever in the manager; every session and prompt kept in
    the in-process backend after `clear`."""
    backend = InProcessBackend(_reply)
    async with TaskManager(backend, InMemoryTaskStore(), _config()) as manager:
        await _cycle(manager, backend, 50)  # warm-up: caches, interned strings
        assert manager.registry.sizes() == (0, 0)
        assert backend.session_ids() == [] and backend.prompts == []
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(4):
                await _cycle(manager, backend, 100)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert manager.registry.sizes() == (0, 0)
        assert backend.session_ids() == [] and backend.prompts == []
        assert len(manager.jobs) == 0
        # 400 tasks went through; what stays is far below one task's worth each (~4 KB)
        assert grown < 200_000, grown


async def _reply(turn: InProcessTurn) -> str:
    """A responder that keeps nothing (the tests' `Script` records every turn)."""
    return "done"


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def _messages(backend: InProcessBackend, session_id: str, n: int) -> bool:
    return len(await backend.messages(session_id)) >= n


async def _none_pending(manager: TaskManager) -> bool:
    return not await manager.store.notices()


async def test_a_turn_started_but_not_recorded_is_followed_by_the_next_manager(
    script: Script,
) -> None:
    """The first manager sent the prompt (or injected a fork's context), could not store that,
    and stopped: the next one finds it in the child's messages and goes on from there instead
    of failing the task or sending it twice."""
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    backend.add_message(parent, "user", "context for the fork")
    store = FlakyStore()
    first = TaskManager(backend, store, _config(store_retry_attempts=50, store_retry_max=0.05))
    await first.start()
    store.fail_updates = -1
    store.spare_new_sessions = True  # their sessions are recorded, nothing after that
    forked = await first.task(parent, "[hold] forked", "explore", "unrecorded fork", fork=True)
    plain = await first.task(parent, "[hold] plain", "explore", "unrecorded")
    forked_session = await session_of(first, forked.id)
    await until(lambda: len(script.seen) == 1)
    await until(lambda: _messages(backend, forked_session, 1))
    await first.close()  # the writes of both were still being retried
    store.fail_updates = 0
    stored_plain, stored_fork = await store.get(plain.id), await store.get(forked.id)
    assert stored_plain is not None and stored_plain.turn_started_at is None
    assert stored_fork is not None and stored_fork.fork_pending
    async with TaskManager(backend, store, _config()) as second:
        adopted = (await second.output(plain.id)).task
        assert adopted.status is TaskStatus.RUNNING and adopted.turn_started_at is not None
        await until(lambda: len(script.seen) == 2)
        script.release.set()
        for task in (forked, plain):
            out = await second.output(task.id, block=True, timeout=5)
            assert out.task.status is TaskStatus.COMPLETED, out.task.error
        assert (await second.output(forked.id)).task.result == "Reply to: [hold] forked"
        child = await backend.messages(forked_session)
        injected = [m for m in child if "<inherited_context>" in str(m["parts"])]
        assert len(injected) == 1  # the context was not injected twice
