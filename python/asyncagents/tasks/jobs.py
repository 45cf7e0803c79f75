"""`Jobs`: the manager's background coroutines, kept so that none is lost or left running."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class Jobs:
    """A set of running tasks: `spawn` keeps a reference until each ends; `cancel_all` stops
    them; `wait_idle` waits for the in-flight ones (for tests and graceful stops)."""

    def __init__(self) -> None:
        self._jobs: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        job = asyncio.get_running_loop().create_task(coro)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return job

    def __len__(self) -> int:
        return len(self._jobs)

    async def wait_idle(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._jobs and loop.time() < end:
            await asyncio.wait(set(self._jobs), timeout=end - loop.time())

    async def cancel_all(self) -> None:
        jobs = list(self._jobs)
        for job in jobs:
            job.cancel()
        for job in jobs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
        self._jobs.clear()


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` s pass; True if set.

    Unlike ``asyncio.wait_for`` before Python 3.12, a cancellation that arrives as the event
    is set is never swallowed (a loop stopped at that moment would run on forever).
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        if not waiter.done():
            waiter.cancel()
    return bool(done)


class PassLoop:
    """A background loop that makes a pass when poked, and every `interval` seconds anyway (the
    safety net for what no poke announces: another process's change, a manager that died).

    A failed pass is logged and the loop goes on; the next poke or interval tries again."""

    def __init__(
        self,
        name: str,
        run_pass: Callable[[], Awaitable[object]],
        interval: float,
        log: logging.Logger,
        failure: str,
    ) -> None:
        self._name = name
        self._run_pass = run_pass
        self._interval = interval
        self._log = log
        self._failure = failure
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop (idempotent); it makes a first pass at once."""
        if self._task is None or self._task.done():
            self._wakeup.set()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Stop the loop; a pass in flight is cancelled."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def poke(self) -> None:
        """Make a pass now (or right after the one in flight)."""
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await wait_event(self._wakeup, self._interval)
            self._wakeup.clear()
            try:
                await self._run_pass()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log.warning("%s: %s", self._failure, exc, exc_info=True)
