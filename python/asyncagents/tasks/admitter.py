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
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .admission import Caps
from .jobs import PassLoop
from .models import Task, now_ms
from .store import TaskStore

log = logging.getLogger(__name__)

#: tasks one `admit` transaction starts at most (a pass repeats while it fills a batch)
BATCH = 50


@dataclass
class _Pass:
    """An admission pass that has not read the queue yet: callers join it until it does."""

    #: the tasks its callers are preparing, admitted all the same (`TaskStore.admit`)
    include: set[str] = field(default_factory=set)
    job: asyncio.Task[list[Task]] | None = None
    #: what it admitted, by id (made once, for the callers that look for their task)
    by_id: dict[str, Task] | None = None


class Admitter:
    """Admits queued tasks of one backend for one manager; hands each to `on_admitted`.

    Passes are shared: a caller that asks for one while another pass is about to read the queue
    joins it, and one that asks while a pass runs joins the next one, which starts when the
    running one ends. So a burst of new tasks costs a few passes, not one each (each pass reads
    every pending task of the backend), and none is missed: a pass reads the queue after every
    task its callers stored.
    """

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
        #: how long another live manager's new queued task is left to it (its lease time)
        self._fresh_ms = fresh_ms
        self._on_admitted = on_admitted
        self._loop = PassLoop(
            "task-admitter", self.admit_now, interval, log, "admission pass failed (retried)"
        )
        self._pass_lock = asyncio.Lock()
        #: the pass new callers join (it has not read the queue yet), if any
        self._next: _Pass | None = None
        #: passes started and not ended
        self._passes: set[asyncio.Task[list[Task]]] = set()
        #: passes planned for when a try again's backoff ends
        self._timers: set[asyncio.TimerHandle] = set()
        #: tasks this manager admitted (for tests and benchmarks)
        self.admitted = 0
        #: passes made (for tests and benchmarks)
        self.passes = 0

    def start(self) -> None:
        """Start the loop (idempotent); it makes a first pass at once."""
        self._loop.start()

    async def stop(self) -> None:
        """Stop the loop and the timers, and wait for the passes under way (their callers wait
        for them: a pass is never cut off), so that nothing is admitted after."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        await self._loop.stop()
        while self._passes:
            await asyncio.wait(set(self._passes))

    def poke(self) -> None:
        """Make a pass now (a slot may have freed, or a task joined the queue)."""
        self._loop.poke()

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

    async def admit_now(self, *, include: str | None = None) -> list[Task]:
        """A pass that reads the queue after this call: admit what the caps allow, hand it on,
        return it (with what the callers it was shared with asked for). `include`: a task that
        may be admitted though its session or fork is still being prepared (by this manager).

        A failing store raises its `StoreError` to every caller of the pass. Cancelling a
        caller leaves the pass running for the others.
        """
        return (await self._shared(include))[1]

    async def admit_task(self, task_id: str, *, preparing: bool = False) -> Task | None:
        """`admit_now` for a caller that looks for one task: that task as the pass admitted
        it, or None if it did not (found by id: a pass shared by many callers admits many).
        `preparing`: it may be admitted though its session or fork is being prepared."""
        joined, admitted = await self._shared(task_id if preparing else None)
        if joined.by_id is None:
            joined.by_id = {t.id: t for t in admitted}
        return joined.by_id.get(task_id)

    async def _shared(self, include: str | None) -> tuple[_Pass, list[Task]]:
        """The pass joined (`_join`) and what it admitted, once it has ended; cancelling the
        caller leaves it running."""
        joined = self._join(include)
        assert joined.job is not None
        return joined, await asyncio.shield(joined.job)

    def _join(self, include: str | None) -> _Pass:
        """The pass that has not read the queue yet (a new one if none), with `include`."""
        joined = self._next
        if joined is None:
            joined = self._next = _Pass()
            joined.job = asyncio.get_running_loop().create_task(
                self._run(joined), name="task-admission-pass"
            )
            self._passes.add(joined.job)
            joined.job.add_done_callback(self._ended)
        if include is not None:
            joined.include.add(include)
        return joined

    def _ended(self, job: asyncio.Task[list[Task]]) -> None:
        self._passes.discard(job)
        if not job.cancelled():
            job.exception()  # retrieved: every caller that waits gets it

    async def _run(self, joined: _Pass) -> list[Task]:
        async with self._pass_lock:
            if self._next is joined:
                self._next = None  # from here on, a caller waits for the next pass
            include = frozenset(joined.include)
            self.passes += 1
            out: list[Task] = []
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
