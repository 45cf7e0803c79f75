"""`Admitter`: starts queued tasks as soon as the caps let them run, in its own loop.

Any live manager of a backend may admit any of its queued tasks (the admitter becomes the
owner): the store's `admit` counts and picks in one transaction, so managers on many hosts share
every cap. A pass runs when something may have freed a slot or queued a task (`poke`: a task
ended, was cancelled or cleared, a task or follow-up was queued, a fork got ready, a takeover),
on start, and every ``admission_interval`` seconds as a safety net (a slot freed by a manager
that died, a cap raised by a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .admission import Caps
from .jobs import wait_event
from .models import Task, now_ms
from .store import TaskStore

log = logging.getLogger(__name__)

#: tasks one `admit` transaction starts at most (a pass repeats while it fills a batch)
BATCH = 50


class Admitter:
    """Admits queued tasks of one backend for one manager; hands each to `on_admitted`."""

    def __init__(
        self,
        store: TaskStore,
        caps: Caps,
        *,
        backend_name: str,
        owner: str,
        interval: float,
        fresh_ms: int,
        on_admitted: Callable[[list[Task]], None],
    ) -> None:
        self._store = store
        self.caps = caps
        self._backend_name = backend_name
        self._owner = owner
        self._interval = interval
        #: how long another live manager's new queued task is left to it (its lease time)
        self._fresh_ms = fresh_ms
        self._on_admitted = on_admitted
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._pass_lock = asyncio.Lock()
        #: passes planned for when a try again's backoff ends
        self._timers: set[asyncio.TimerHandle] = set()
        #: tasks this manager admitted (for tests and benchmarks)
        self.admitted = 0

    def start(self) -> None:
        """Start the loop (idempotent); it makes a first pass at once."""
        if self._loop_task is None or self._loop_task.done():
            self._wakeup.set()
            self._loop_task = asyncio.get_running_loop().create_task(
                self._run(), name="task-admitter"
            )

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def poke(self) -> None:
        """Make a pass now (a slot may have freed, or a task joined the queue)."""
        self._wakeup.set()

    def poke_at(self, at_ms: int | None) -> None:
        """Make a pass now, and another when a queued try again's backoff ends (epoch ms): the
        queue skips it until then (the periodic pass is the safety net of other managers)."""
        self.poke()
        if at_ms is None:
            return
        loop = asyncio.get_running_loop()
        # a little after the end, so that the pass finds it over
        delay = max(0.0, (at_ms - now_ms()) / 1000) + 0.01

        def fire() -> None:
            self._timers.discard(timer)
            self.poke()

        timer = loop.call_later(delay, fire)
        self._timers.add(timer)

    async def _run(self) -> None:
        while True:
            await wait_event(self._wakeup, self._interval)
            self._wakeup.clear()
            try:
                await self.admit_now()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("admission pass failed (retried): %s", exc)

    async def admit_now(self, *, include: str | None = None) -> list[Task]:
        """One pass: admit what the caps allow now, hand it on, return it. `include`: a task
        that may be admitted though its fork is still being prepared (by this manager)."""
        out: list[Task] = []
        async with self._pass_lock:
            while True:
                batch = await self._store.admit(
                    self._backend_name,
                    self.caps,
                    self._owner,
                    BATCH,
                    include=include,
                    fresh_ms=self._fresh_ms,
                )
                if batch:
                    self.admitted += len(batch)
                    out.extend(batch)
                    self._on_admitted(batch)
                if len(batch) < BATCH:
                    return out
