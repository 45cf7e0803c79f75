"""`until`: poll a condition in a test, for the in-process and the end-to-end task tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


async def until(
    cond: Callable[[], bool | Awaitable[bool]],
    timeout: float = 5.0,
    what: str = "condition",
    every: float = 0.01,
) -> None:
    """Poll `cond` (sync or async) every `every` s until it holds; fail after `timeout` s."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = cond()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if loop.time() > end:
            raise AssertionError(f"{what} not met within {timeout:g}s")
        await asyncio.sleep(every)


async def session_of(manager: Any, task_id: str, timeout: float = 10.0) -> str:
    """The child session of a task: created in the background after `TaskManager.task`
    returns, so polled for in the store (fails if it never comes)."""
    found: list[str] = []

    async def created() -> bool:
        task = await manager.store.get(task_id)
        if task is not None and task.session_id:
            found.append(task.session_id)
        return bool(found)

    await until(created, timeout, f"the child session of {task_id}")
    return found[0]
