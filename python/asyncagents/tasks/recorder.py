"""`Recorder`: the one path by which the manager changes a stored task, and what follows a change.

After every stored change it tells the listeners (`TaskChange`), drops the run of a turn that
ended, wakes the callers waiting in ``output(block=True)``, and hands a new notice to the
courier. Background steps retry a failing store write with backoff; a write that still fails is
left to the watcher's next periodic check (the run stays followed until its end is stored).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .config import TaskManagerConfig
from .jobs import wait_event
from .models import Notice, Task, TaskChange, TaskChangeKind, TaskStatus
from .registry import RunRegistry
from .store import Mutation, TaskStore

log = logging.getLogger(__name__)

Listener = Callable[[TaskChange], None]

_END_KINDS: dict[TaskStatus, TaskChangeKind] = {
    TaskStatus.COMPLETED: "task.completed",
    TaskStatus.ERROR: "task.error",
    TaskStatus.CANCELLED: "task.cancelled",
    TaskStatus.RESUMED: "task.resumed",
    TaskStatus.RUNNING: "task.updated",
    # the turn ended into a queued follow-up (or a try again) that waits for a slot
    TaskStatus.QUEUED: "task.resumed",
}


def end_kind(task: Task) -> TaskChangeKind:
    """The change kind of a turn's end, from the status it left the task in."""
    return _END_KINDS[task.status]


class Recorder:
    """Applies mutations to the store and fans out their consequences."""

    def __init__(
        self,
        store: TaskStore,
        registry: RunRegistry,
        config: TaskManagerConfig,
        *,
        on_notice: Callable[[Notice], None],
    ) -> None:
        self.store = store
        self._registry = registry
        self._config = config
        self._on_notice = on_notice
        self._listeners: list[Listener] = []
        #: set (and replaced) at every change: what ``output(block=True)`` waits on
        self._changed = asyncio.Event()
        #: turns ended by this manager (for benchmarks)
        self.completions = 0

    # -- listeners ----------------------------------------------------------------------------

    def add_listener(self, callback: Listener) -> None:
        self._listeners.append(callback)

    def remove_listener(self, callback: Listener) -> None:
        try:
            self._listeners.remove(callback)
        except ValueError:
            pass

    def emit(self, kind: TaskChangeKind, task: Task) -> None:
        """Call every listener; one that raises is logged and does not stop the others."""
        if not self._listeners:
            return
        change = TaskChange(kind=kind, task=task)
        for callback in list(self._listeners):
            try:
                callback(change)
            except Exception:
                log.exception("task listener %r failed on %s", callback, kind)

    # -- changes ------------------------------------------------------------------------------

    async def apply(
        self,
        task_id: str,
        mutate: Mutation,
        kind: TaskChangeKind | Callable[[Task], TaskChangeKind],
        *,
        background: bool = False,
    ) -> tuple[Task, Notice | None] | None:
        """Apply `mutate`; None when the task is gone or the mutation declined.

        In the `background`, a failing write is retried with backoff, then given up (logged;
        None): the caller's periodic work repeats it. Otherwise the store's error is raised.
        """
        attempts = self._config.store_retry_attempts if background else 1
        delay = self._config.store_retry_initial
        for attempt in range(1, attempts + 1):
            try:
                out = await self.store.update(task_id, mutate)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if attempt == attempts:
                    if not background:
                        raise
                    log.warning("store write for %s failed %d times: %s", task_id, attempt, exc)
                    return None
                log.info("store write for %s failed (attempt %d): %s", task_id, attempt, exc)
                await asyncio.sleep(delay)
                delay = min(self._config.store_retry_max, delay * 2)
        if out is None:
            return None
        task, notice = out
        self.changed(task, kind if isinstance(kind, str) else kind(task), notice)
        return out

    def changed(self, task: Task, kind: TaskChangeKind, notice: Notice | None = None) -> None:
        """What follows a stored change (also called for changes stored elsewhere: insert...)."""
        # a queued copy leaves the run alone: it may come after the task's admission by another
        # coroutine (it is old news then)
        if not task.status.pending:
            if self._registry.drop(task.id, task.turn) is not None:
                self.completions += 1
        elif task.status.active:
            run = self._registry.get(task.id)
            if run is not None and run.turn == task.turn:
                run.task = task  # progress events show the task as stored now
        self.emit(kind, task)
        if notice is not None:
            self._on_notice(notice)
        self.poke()

    def poke(self) -> None:
        """Wake the callers waiting for a change."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_ended(self, task_id: str, timeout: float) -> bool:
        """True when the task's current turn (queued or running) ended (or it is gone) within
        `timeout` s.

        Changes made here wake the wait at once; changes made by another manager (a takeover
        owner, a cancel from another worker) are seen at the next re-read, every poll interval.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        first = await self.store.get(task_id)
        if first is None:
            return True
        turn = first.turn
        while True:
            changed = self._changed  # taken before the read: no change is missed
            current = await self.store.get(task_id)
            if current is None or current.turn != turn or not current.status.pending:
                return True
            left = end - loop.time()
            if left <= 0:
                return False
            await wait_event(changed, min(left, self._config.poll_interval))
