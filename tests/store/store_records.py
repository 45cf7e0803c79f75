"""Task and notice records for the store tests: unique ids, chosen times, every field set."""

from __future__ import annotations

import itertools

from asyncagents.tasks.models import Notice, NoticeKind, Task, TaskStatus

RUNNING, RESUMED, COMPLETED = TaskStatus.RUNNING, TaskStatus.RESUMED, TaskStatus.COMPLETED

_IDS = itertools.count(1)


def make_task(
    task_id: str | None = None,
    *,
    parent: str = "ses_parent",
    backend: str = "b1",
    owner: str | None = None,
    status: TaskStatus = RUNNING,
    created_at: int | None = None,
    session_id: str | None = None,
) -> Task:
    n = next(_IDS)
    return Task(
        id=task_id or f"tsk_{n:06d}",
        parent_session_id=parent,
        session_id=session_id,
        prompt=f"prompt {n} ✓",
        agent="general",
        description=f"task {n}",
        status=status,
        backend=backend,
        owner=owner,
        created_at=1_000_000 + n if created_at is None else created_at,
    )


def make_notice(
    task: Task, *, next_attempt_at: int = 0, created_at: int | None = None, text: str = "done"
) -> Notice:
    n = next(_IDS)
    return Notice(
        id=f"ntc_{n:06d}",
        task_id=task.id,
        parent_session_id=task.parent_session_id,
        kind=NoticeKind.COMPLETED,
        turn=task.turn,
        text=text,
        backend=task.backend,
        next_attempt_at=next_attempt_at,
        created_at=2_000_000 + n if created_at is None else created_at,
    )
