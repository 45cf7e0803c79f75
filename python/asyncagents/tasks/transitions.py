"""Every state change of a task as a pure function: each returns the `Mutation` the store applies.

A mutation reads the stored task inside the store's transaction and declines (returns None)
when the task is no longer in the state the change was decided on: a late completion can never
overwrite a cancel or a newer turn, and two managers racing on one task change it once.

Lifecycle: queued -> running -> completed | error | cancelled; completed -> queued -> resumed ->
completed. A follow-up (resumed turn) that fails or is cancelled returns the task to
``completed`` with its last good result, so it can be resumed again; `Task.error` then says why
the follow-up failed. A queued turn leaves the queue by `admitted` (see `admission`).
"""

from __future__ import annotations

from .models import Notice, NoticeKind, Task, TaskProgress, TaskStatus, new_id, now_ms
from .notices import format_notice
from .store import Mutation

Outcome = tuple[Task, Notice | None] | None


def _touch(t: Task) -> None:
    """Mark a change: `updated_at` only grows, even when the clock of the host that makes this
    change is behind the one that made the last (readers order a task's copies by it)."""
    t.updated_at = max(now_ms(), t.updated_at + 1)


def started(turn: int, after_message_id: str | None) -> Mutation:
    """The turn's prompt was accepted by the server."""

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.active:
            return None
        t.turn_after_message_id = after_message_id
        t.turn_started_at = now_ms()
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
) -> Mutation:
    """End the turn once, with its notice for the parent (saved in the same transaction).

    With `owner`, only while that manager owns the task (after a takeover, the new owner ends it).
    A queued turn can end too (its fork could not be prepared).
    """

    def mutate(t: Task) -> Outcome:
        if t.turn != turn or not t.status.pending:
            return None
        if owner is not None and t.owner is not None and t.owner != owner:
            return None
        followup = t.resume_count > 0
        t.completed_at = now_ms()
        _touch(t)
        t.result_retrieved_at = None
        if progress is not None:
            t.progress = progress
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
        if not notify:
            return t, None
        notice_id = new_id("ntc")
        notice = Notice(
            id=notice_id,
            task_id=t.id,
            parent_session_id=t.parent_session_id,
            kind=kind,
            turn=t.turn,
            text=format_notice(notice_id, t, kind),
            backend=t.backend,
        )
        return t, notice

    return mutate


#: `Task.error` of a task cancelled by its parent
CANCELLED_BY_PARENT = "cancelled by the parent"
#: `Task.error` of a completed task whose follow-up its parent cancelled
FOLLOWUP_CANCELLED = "the follow-up was cancelled by the parent"


def cancelled() -> Mutation:
    """The parent cancelled the queued or running turn (no notice: the parent did it).

    A cancelled follow-up returns the task to ``completed`` with its last result.
    """

    def mutate(t: Task) -> Outcome:
        if not t.status.pending:
            return None
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
    prompt: str, after_message_id: str | None, owner: str, message_id: str | None = None
) -> Mutation:
    """A follow-up turn of a completed task joins the queue (admission starts it).

    `message_id` is the id its prompt is sent with (`models.message_id_after`)."""

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
