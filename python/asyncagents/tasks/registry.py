"""The runs a manager follows now: one `Run` per task it owns whose turn is running.

A run holds everything the manager keeps about a turn in memory: its session, the first
``session.error`` seen (the reason, if it fails), the liveness clock for stall detection, the
progress events showed, and the lock that serialises its checks. It is created when the manager
starts following a turn and dropped, with all of it, when the turn ends: nothing per task
outlives its run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from .models import Task, TaskProgress
from .usage import UsageCounter


@dataclass(eq=False)
class Run:
    """One followed turn of one task."""

    #: the task as last stored by this manager (progress events show it)
    task: Task
    session_id: str
    turn: int
    #: last message id before the turn's prompt, once the prompt was accepted
    after_message_id: str | None = None
    #: the prompt was accepted by the server (even if storing that failed)
    prompt_sent: bool = False
    #: first ``session.error`` of the turn: the reason when it ends without a reply
    first_error: str | None = None
    #: monotonic time the session last showed life (None: not measured yet)
    alive_at: float | None = None
    progress: TaskProgress = field(default_factory=TaskProgress)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    check_pending: bool = False
    #: the tool calls of the turn events or the last check showed (a new one is progress)
    call_ids: set[str] = field(default_factory=set)
    #: tokens and cost of the session's assistant messages, from reads and events
    usage: UsageCounter = field(default_factory=UsageCounter)
    #: monotonic time of the child's last progress (a message, part or tool change); unlike
    #: `alive_at`, a busy status is not progress (a hung model stream stays busy)
    progress_at: float | None = None
    #: the turn's `TurnState.activity` at the last read
    activity: tuple[int, int, int, int] | None = None

    @property
    def task_id(self) -> str:
        return self.task.id

    def touch(self) -> None:
        """The session showed life (an event, or busy in the status)."""
        self.alive_at = time.monotonic()

    def progressed(self) -> None:
        """The child made progress (which is also a sign of life)."""
        self.progress_at = self.alive_at = time.monotonic()

    def idle_for(self) -> float:
        """Seconds without progress; the clock starts at the first call."""
        now = time.monotonic()
        if self.progress_at is None:
            self.progress_at = now
        return now - self.progress_at

    def quiet_for(self) -> float:
        """Seconds without a sign of life; the clock starts at the first call."""
        now = time.monotonic()
        if self.alive_at is None:
            self.alive_at = now
        return now - self.alive_at


class RunRegistry:
    """Runs by task id and by session id (the two keys events and calls use)."""

    def __init__(self) -> None:
        self._by_task: dict[str, Run] = {}
        self._by_session: dict[str, Run] = {}

    def follow(self, task: Task) -> Run:
        """Start following the current turn of `task` (replacing any older run of it)."""
        assert task.session_id is not None, "a followed task has a session"
        self.drop(task.id)
        run = Run(
            task=task,
            session_id=task.session_id,
            turn=task.turn,
            after_message_id=task.turn_after_message_id,
            prompt_sent=task.turn_started_at is not None,
            progress=task.progress.model_copy(),
        )
        self._by_task[task.id] = run
        self._by_session[run.session_id] = run
        return run

    def drop(self, task_id: str, turn: int | None = None) -> Run | None:
        """Forget the run of `task_id` (of that turn only, when given)."""
        run = self._by_task.get(task_id)
        if run is None or (turn is not None and run.turn != turn):
            return None
        del self._by_task[task_id]
        if self._by_session.get(run.session_id) is run:
            del self._by_session[run.session_id]
        return run

    def get(self, task_id: str) -> Run | None:
        return self._by_task.get(task_id)

    def by_session(self, session_id: str) -> Run | None:
        return self._by_session.get(session_id)

    def __len__(self) -> int:
        return len(self._by_task)

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._by_task.values()))

    def sizes(self) -> tuple[int, int]:
        """(runs by task, runs by session): both 0 when nothing is followed (for tests)."""
        return len(self._by_task), len(self._by_session)
