"""Rows to records and back, shared by the SQL stores.

A task or notice is kept as its JSON in a ``data`` column, beside columns the queries filter on.
The columns that change without rewriting the JSON (a task's `owner` on take-over, a notice's
claim) are the truth: loading puts them over the JSON's values. A row whose JSON does not load
is logged and skipped, never raised: one bad row must not make a store unusable.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from ..models import Notice, Task
from ..queries import no_nul, search_text, tools_unrecorded, turn_duration_ms

log = logging.getLogger("asyncagents.tasks.store")


def load_task(
    where: str, task_id: str, data: str | bytes, backend: str, owner: str | None
) -> Task | None:
    """The task of a row, or None (with a warning naming the store and the id) if it is broken."""
    try:
        task = Task.model_validate_json(data)
    except (ValidationError, ValueError) as exc:
        log.warning("%s: skipping task row %r that does not load: %s", where, task_id, exc)
        return None
    task.backend = backend
    task.owner = owner
    return task


def load_notice(
    where: str,
    notice_id: str,
    data: str | bytes,
    backend: str,
    claimed_by: str | None,
    claim_expires_at: int | None,
    next_attempt_at: int,
) -> Notice | None:
    """The notice of a row, or None (with a warning) if it is broken."""
    try:
        notice = Notice.model_validate_json(data)
    except (ValidationError, ValueError) as exc:
        log.warning("%s: skipping notice row %r that does not load: %s", where, notice_id, exc)
        return None
    notice.backend = backend
    notice.claimed_by = claimed_by
    notice.claim_expires_at = claim_expires_at
    notice.next_attempt_at = next_attempt_at
    return notice


def seconds_to_ms(seconds: float) -> int:
    """A TTL in whole milliseconds, the unit of every stored time."""
    return round(seconds * 1000)


def derived(task: Task) -> tuple[str, int, int | None, str, int]:
    """The columns the queries read that come from a task's JSON: agent, updated_at, the last
    turn's duration, the searchable text and whether its tool names are missing."""
    return (
        no_nul(task.agent),
        task.updated_at,
        turn_duration_ms(task),
        search_text(task),
        int(tools_unrecorded(task)),
    )


def like_pattern(text: str) -> str:
    """A ``LIKE`` pattern (escape ``\\``) matching `text` anywhere, case-folded."""
    escaped = text.casefold().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


#: what a task's ``task_tools`` rows follow from: backend, parent, tool calls by name
ToolsKey = tuple[str, str, tuple[tuple[str, int], ...]]


def tools_key(task: Task) -> ToolsKey:
    """What the tool rows of `task` depend on (rewritten only when it changes)."""
    return (task.backend, task.parent_session_id, tuple(sorted(task.progress.tools.items())))
