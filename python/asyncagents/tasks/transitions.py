"""Every state change of a task as a pure function: each returns the `Mutation` the store applies.

A mutation reads the stored task inside the store's transaction and declines (returns None)
when the task is no longer in the state the change was decided on: a late completion can never
overwrite a cancel or a newer turn, and two managers racing on one task change it once.

Lifecycle: queued -> running -> completed | error | cancelled; completed -> queued -> resumed ->
completed. A turn that ended into a try again (a provider error) or into a queued follow-up
goes back to ``queued`` and gives up its slot until admitted again. A follow-up (resumed turn)
that fails or is cancelled returns the task to ``completed`` with its last good result, so it
can be resumed again; `Task.error` then says why the follow-up failed. A queued turn leaves the
queue by `admitted` (see `admission`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .models import (
    FollowUp,
    Notice,
    NoticeKind,
    Task,
    TaskLimits,
    TaskProgress,
    TaskStatus,
    TaskUsage,
    message_id_after,
    new_id,
    now_ms,
)
from .notices import NOTICE_RESULT_CHARS, build_notice
from .store import Mutation

Outcome = tuple[Task, Notice | None] | None


def _touch(t: Task) -> None:
    """Mark a change: `updated_at` only grows, even when the clock of the host that makes this
    change is behind the one that made the last (readers order a task's copies by it)."""
    t.updated_at = max(now_ms(), t.updated_at + 1)


@dataclass(frozen=True)
class Usage:
    """A task's counted usage: all turns, the current turn, all turns by model."""

    total: TaskUsage
    turn: TaskUsage
    by_model: dict[str, TaskUsage]

    def apply(self, t: Task) -> bool:
        """Store it on `t`; True when something changed."""
        if (t.usage, t.turn_usage, t.usage_by_model) == (self.total, self.turn, self.by_model):
            return False
        t.usage = self.total.model_copy()
        t.turn_usage = self.turn.model_copy()
        t.usage_by_model = {k: v.model_copy() for k, v in self.by_model.items()}
        return True


def counted(turn: int, usage: Usage) -> Mutation:
    """Tokens and cost of a running turn, counted so far (other workers read them)."""

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.active or not usage.apply(t):
            return None
        _touch(t)
        return t, None

    return mutate


def started(turn: int, after_message_id: str | None) -> Mutation:
    """The turn's prompt was accepted by the server."""

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.active:
            return None
        t.turn_after_message_id = after_message_id
        t.turn_started_at = now_ms()
        t.retry_at = None
        _touch(t)
        return t, None

    return mutate


def finished(
    turn: int,
    status: TaskStatus,
    *,
    text: str | None = None,
    error: str | None = None,
    progress: TaskProgress | None = None,
    notify: bool = True,
    owner: str | None = None,
    usage: Usage | None = None,
    result_chars: int = NOTICE_RESULT_CHARS,
    after: str | None = None,
) -> Mutation:
    """End the turn once, with its notice for the parent (saved in the same transaction).

    With `owner`, only while that manager owns the task (after a takeover, the new owner ends it).
    A queued turn can end too (its fork could not be prepared).
    The notice carries at most `result_chars` characters of the result.
    `after`: the turn's last message id, when known; a task left ``completed`` with queued
    follow-ups then queues the first of them for admission in the same write (see `FollowUp`):
    it waits for a slot like any task.
    """

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.pending:
            return None
        if owner is not None and t.owner is not None and t.owner != owner:
            return None
        if t.pending_followups and t.pending_followups[0].interrupt and after is not None:
            # aborted for a follow-up sent with when="now": no notice, the follow-up goes next
            if status is TaskStatus.COMPLETED:
                t.result = text  # it ended before the abort did
            _start_next(t, after, queue=False)
            return t, None
        followup = t.resume_count > 0
        t.completed_at = now_ms()
        _touch(t)
        t.result_retrieved_at = None
        if progress is not None:
            t.progress = progress
        if usage is not None:
            usage.apply(t)
        if followup and status is not TaskStatus.COMPLETED:
            # the session and its history are intact: keep the last good result
            t.status = TaskStatus.COMPLETED
            t.error = error
            kind = NoticeKind.RESUME_FAILED
        else:
            t.status = status
            t.result = text if status is TaskStatus.COMPLETED else (text or None)
            t.error = error
            if status is TaskStatus.COMPLETED:
                kind = NoticeKind.RESUME_COMPLETED if followup else NoticeKind.COMPLETED
            else:
                kind = NoticeKind.ERROR
        dropped = 0
        if t.status is not TaskStatus.COMPLETED and t.pending_followups:
            # the task ended for good: nothing can answer its queued follow-ups
            dropped = len(t.pending_followups)
            t.pending_followups = []
        notice: Notice | None = None
        if notify:
            note = dropped_line(dropped) if dropped else ""
            notice = build_notice(new_id("ntc"), t, kind, result_chars, note)
        if t.status is TaskStatus.COMPLETED and t.pending_followups and after is not None:
            # the next queued follow-up is the next resume, in the same write, queued for a
            # slot: whoever admits it sends it (its message id is chosen here, so it is sent
            # once)
            _start_next(t, after)
        return t, notice

    return mutate


def retried(turn: int, after: str, model: str | None, delay: float, error: str) -> Mutation:
    """The turn ended on a retryable provider error: the same prompt goes again, as a new user
    message after `after` (a turn that completed is never repeated), on `model`, once `delay`
    seconds passed and the caps let it run: it gives up its slot and waits in the queue, not
    admitted before `retry_at`. No notice: the parent hears once, at the end."""

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.active:
            return None
        t.status = TaskStatus.QUEUED
        t.admitted_at = None
        t.tries = [*(t.tries or [t.model]), model]
        t.model = model
        t.turn += 1
        t.turn_after_message_id = after
        t.prompt_message_id = message_id_after(after, 0, os.urandom(5).hex())
        t.turn_started_at = None
        t.retry_at = now_ms() + int(delay * 1000)
        t.retry_error = error
        t.progress = TaskProgress()
        _touch(t)
        return t, None

    return mutate


def dropped_line(count: int) -> str:
    """What the parent is told of queued follow-ups dropped by a cancel or a failure."""
    return f"Dropped {count} queued follow-up(s); they were not sent."


def _start_next(t: Task, after: str, *, queue: bool = True) -> None:
    """Make the first queued follow-up the next resume: its prompt goes after `after`. It
    waits in the admission queue for a slot (`queue`), or, sent with ``when="now"``, keeps the
    slot of the turn it aborted (the running count does not change)."""
    followup = t.pending_followups.pop(0)
    if queue:
        t.status = TaskStatus.QUEUED
        t.admitted_at = None
    else:
        t.status = TaskStatus.RESUMED
    t.resume_count += 1
    t.turn += 1
    t.last_prompt = followup.prompt
    t.turn_after_message_id = after
    t.prompt_message_id = message_id_after(after, 0, followup.token)
    t.turn_started_at = None
    t.tries = []
    t.retry_at = None
    t.retry_error = None
    t.result_retrieved_at = None
    t.error = None
    t.progress = TaskProgress()
    _touch(t)


#: the most follow-ups one task holds queued (each is a stored prompt)
MAX_QUEUED_FOLLOWUPS = 20


def between_turns(t: Task) -> bool:
    """The task's next turn waits in the queue after one that ran: a try again after a
    provider error, or a follow-up (its session has answered before)."""
    return t.status is TaskStatus.QUEUED and (t.resume_count > 0 or bool(t.tries))


def queue_followup(followup: FollowUp) -> Mutation:
    """Store a follow-up for the running (or waiting) turn's end; one sent with ``when="now"``
    goes before those waiting (after any other "now" one). Declines past
    `MAX_QUEUED_FOLLOWUPS`.

    A "now" follow-up of a task whose next turn waits in the queue (`between_turns`: nothing
    runs to abort) takes that turn's place at once: a waiting try again is dropped (the failed
    turn ends without a notice, as an aborted one does), a waiting follow-up goes back first
    in line behind it. It still waits for a slot, without the backoff."""

    def mutate(t: Task) -> Outcome:
        waiting = between_turns(t)
        if not (t.status.active or waiting) or len(t.pending_followups) >= MAX_QUEUED_FOLLOWUPS:
            return None
        at = len(t.pending_followups)
        if followup.interrupt:
            at = sum(1 for f in t.pending_followups if f.interrupt)
        t.pending_followups.insert(at, followup)
        if followup.interrupt and waiting:
            if not t.tries:
                # the waiting follow-up was never sent: it goes next, after this one
                again = FollowUp(prompt=t.last_prompt or t.prompt)
                t.pending_followups.insert(at + 1, again)
                t.resume_count -= 1
            after = t.turn_after_message_id
            _start_next(t, after or "")
            t.turn_after_message_id = after
            return t, None
        _touch(t)
        return t, None

    return mutate


def resumed_queued(followup_id: str, after: str | None, owner: str, message_id: str) -> Mutation:
    """A completed task's first queued follow-up joins the admission queue (when its turn's
    end could not name the last message, it is queued from here)."""

    def mutate(t: Task) -> Outcome:
        if t.status is not TaskStatus.COMPLETED or not t.pending_followups:
            return None
        if t.pending_followups[0].id != followup_id:
            return None
        t.owner = owner
        _start_next(t, after or "")
        t.turn_after_message_id = after
        t.prompt_message_id = message_id
        return t, None

    return mutate


#: `Task.error` of a task cancelled by its parent
CANCELLED_BY_PARENT = "cancelled by the parent"
#: `Task.error` of a completed task whose follow-up its parent cancelled
FOLLOWUP_CANCELLED = "the follow-up was cancelled by the parent"


def cancelled(dropped: list[int] | None = None) -> Mutation:
    """The parent cancelled the queued or running turn (no notice: the parent did it).

    A cancelled follow-up returns the task to ``completed`` with its last result. Queued
    follow-ups are dropped; their number is appended to `dropped`.
    """

    def mutate(t: Task) -> Outcome:
        if not t.status.pending:
            return None
        if dropped is not None:
            dropped.append(len(t.pending_followups))
        t.pending_followups = []
        t.completed_at = now_ms()
        _touch(t)
        if t.resume_count > 0:
            t.status = TaskStatus.COMPLETED
            t.error = FOLLOWUP_CANCELLED
        else:
            t.status = TaskStatus.CANCELLED
            t.error = CANCELLED_BY_PARENT
        return t, None

    return mutate


def resumed(
    prompt: str,
    after_message_id: str | None,
    owner: str,
    message_id: str | None = None,
    limits: TaskLimits | None = None,
) -> Mutation:
    """A follow-up turn of a completed task joins the queue (admission starts it).

    `message_id` is the id its prompt is sent with (`models.message_id_after`); `limits` the
    follow-up asked for replace the task's (those it leaves out stay).
    """

    def mutate(t: Task) -> Outcome:
        if t.status is not TaskStatus.COMPLETED:
            return None
        t.status = TaskStatus.QUEUED
        t.owner = owner
        t.admitted_at = None
        t.fork_pending = False
        t.resume_count += 1
        t.turn += 1
        t.last_prompt = prompt
        t.turn_after_message_id = after_message_id
        t.prompt_message_id = message_id
        t.turn_started_at = None
        t.result_retrieved_at = None
        t.error = None
        t.progress = TaskProgress()
        t.turn_usage = TaskUsage()
        if limits is not None:
            asked = limits.model_dump(exclude_none=True)
            t.limits = t.limits.model_copy(update=asked)
        t.tries = []
        t.retry_at = None
        t.retry_error = None
        _touch(t)
        return t, None

    return mutate


def retrieved(turn: int) -> Mutation:
    """The parent read the ended turn's result (first read only)."""

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or t.status.pending or t.result_retrieved_at is not None:
            return None
        t.result_retrieved_at = now_ms()
        return t, None

    return mutate


def session_created(session_id: str, context_message_id: str, prompt_message_id: str) -> Mutation:
    """A new task's child session was created, with the message ids chosen in it: recorded
    once. Declines when a session is recorded already (another manager created one first: the
    task keeps that one) or the task ended meanwhile."""

    def mutate(t: Task) -> Outcome:
        if t.session_id is not None or not t.status.pending:
            return None
        t.session_id = session_id
        t.context_message_id = context_message_id
        t.prompt_message_id = prompt_message_id
        _touch(t)
        return t, None

    return mutate


def fork_prepared(after_message_id: str | None, stats: dict[str, object] | None) -> Mutation:
    """A forked task's copy of the parent's context is in its session: it may start (or, if it
    was admitted already, its prompt may be sent).

    `after_message_id` is the injected message (None: nothing to inject); the turn is what
    follows it.
    """

    def mutate(t: Task) -> Outcome:
        if not t.status.pending or not t.fork_pending:
            return None
        t.fork_pending = False
        t.turn_after_message_id = after_message_id
        t.fork_stats = stats
        _touch(t)
        return t, None

    return mutate
