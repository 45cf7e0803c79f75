"""2,000 concurrent tasks in one process: none lost, none finished or notified twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from parent_notices import notices_in
from polling import until

TASKS = 2_000
PARENTS = 20


async def _reply(turn: InProcessTurn) -> str:
    await asyncio.sleep(0.01)
    return "done: " + turn.prompt


async def test_2000_concurrent_tasks_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    backend = InProcessBackend(_reply)
    parents = [str((await backend.create_session())["id"]) for _ in range(PARENTS)]
    store = SQLiteTaskStore(tmp_path / "tasks.sqlite3")
    ended: Counter[str] = Counter()
    config = TaskManagerConfig(
        poll_interval=2.0, wake="never", notice_interval=0.2, max_running=TASKS
    )
    async with TaskManager(backend, store, config) as manager:
        manager.add_listener(
            lambda change: ended.update([change.task.id])
            if change.kind in ("task.completed", "task.error")
            else None
        )
        tasks = await asyncio.gather(
            *(
                manager.task(parents[i % PARENTS], f"job {i}", "explore", f"j{i}")
                for i in range(TASKS)
            )
        )
        await until(lambda: _all_done(store), timeout=240, what="all completed", every=0.5)
        await until(lambda: _no_notices(store), timeout=240, what="all notified", every=0.5)
        await asyncio.sleep(1.0)
    assert manager.completions == TASKS
    assert set(ended.values()) == {1} and len(ended) == TASKS
    results = {t.id: t.result for t in await store.list_tasks()}
    assert results == {t.id: f"done: {t.prompt}" for t in tasks}
    notified: Counter[str] = Counter()
    for parent in parents:
        for notice in await notices_in(backend, parent):
            notified.update(t.id for t in tasks if f"Background task `{t.id}` " in notice)
    assert len(notified) == TASKS and set(notified.values()) == {1}
    await store.close()


async def _all_done(store: SQLiteTaskStore) -> bool:
    tasks = await store.list_tasks()
    return len(tasks) == TASKS and all(t.status is TaskStatus.COMPLETED for t in tasks)


async def _no_notices(store: SQLiteTaskStore) -> bool:
    return not await store.notices()
