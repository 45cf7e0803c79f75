"""Rows to records and back, shared by the SQL stores.

A task or notice is kept as its JSON in a ``data`` column, beside columns the queries filter on.
The columns that change without rewriting the JSON (a task's `owner` on take-over, a notice's
claim) are the truth: loading puts them over the JSON's values. A row whose JSON does not load
is logged and skipped, never raised: one bad row must not make a store unusable.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..models import Notice, Task, TaskStatus
from ..queries import (
    DurationSummary,
    TaskQuery,
    TaskStats,
    no_nul,
    search_text,
    sorted_tools,
    tools_unrecorded,
    turn_duration_ms,
)

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
#: a row of ``task_counts``: (backend, status, agent)
CountKey = tuple[str, str, str]


def tools_key(task: Task) -> ToolsKey:
    """What the tool rows of `task` depend on (rewritten only when it changes)."""
    return (task.backend, task.parent_session_id, tuple(sorted(task.progress.tools.items())))


class Footprint(tuple[CountKey, tuple[int, int, int], ToolsKey]):
    """What a stored task adds to the running totals (``task_counts``, ``tool_totals``) and
    its tool rows: its count key, (1, tools unrecorded, has a duration), its `tools_key`."""

    __slots__ = ()

    @classmethod
    def of(cls, task: Task) -> Footprint:
        counted = (1, int(tools_unrecorded(task)), int(turn_duration_ms(task) is not None))
        return cls(
            ((task.backend, task.status.value, no_nul(task.agent)), counted, tools_key(task))
        )


#: changes of ``task_counts`` rows: key -> (tasks, unrecorded, timed)
CountDeltas = dict[CountKey, tuple[int, int, int]]
#: changes of ``tool_totals`` rows: (backend, tool) -> calls
ToolDeltas = dict[tuple[str, str], int]


def total_deltas(
    before: Footprint | None, after: Footprint | None
) -> tuple[CountDeltas, ToolDeltas]:
    """How the running totals change when a task's footprint goes from `before` to `after`
    (None: absent); only the rows that change, in key order (writers lock them in that order,
    so two never wait on each other in a cycle)."""
    counts: dict[CountKey, list[int]] = {}
    tools: dict[tuple[str, str], int] = {}
    for footprint, sign in ((before, -1), (after, 1)):
        if footprint is None:
            continue
        key, counted, (backend, _, named) = footprint
        row = counts.setdefault(key, [0, 0, 0])
        for i, value in enumerate(counted):
            row[i] += sign * value
        for name, calls in named:
            tools[(backend, name)] = tools.get((backend, name), 0) + sign * calls
    return (
        {k: (v[0], v[1], v[2]) for k, v in sorted(counts.items()) if any(v)},
        {k: v for k, v in sorted(tools.items()) if v},
    )


#: the statements that rebuild the running totals from the tasks (migrations, bulk loads)
REBUILD_TOTALS = (
    "DELETE FROM task_counts",
    "INSERT INTO task_counts (backend, status, agent, tasks, unrecorded, timed) "
    "SELECT backend, status, agent, count(*), sum(tools_unrecorded), count(duration_ms) "
    "FROM tasks GROUP BY backend, status, agent",
    "DELETE FROM tool_totals",
    "INSERT INTO tool_totals (backend, tool, calls) "
    "SELECT backend, tool, sum(calls) FROM task_tools GROUP BY backend, tool",
)
#: the running totals' tables, the same on both SQL stores
TOTALS_TABLES = (
    "CREATE TABLE task_counts (backend TEXT NOT NULL, status TEXT NOT NULL, agent TEXT NOT NULL, "
    "tasks BIGINT NOT NULL, unrecorded BIGINT NOT NULL, timed BIGINT NOT NULL, "
    "PRIMARY KEY (backend, status, agent))",
    "CREATE TABLE tool_totals (backend TEXT NOT NULL, tool TEXT NOT NULL, calls BIGINT NOT NULL, "
    "PRIMARY KEY (backend, tool))",
)
#: one change of a ``task_counts`` row (the `?`/`%s` placeholder is the store's)
ADD_COUNTS = (
    "INSERT INTO task_counts (backend, status, agent, tasks, unrecorded, timed) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (backend, status, agent) DO UPDATE SET "
    "tasks = task_counts.tasks + excluded.tasks, "
    "unrecorded = task_counts.unrecorded + excluded.unrecorded, "
    "timed = task_counts.timed + excluded.timed"
)
ADD_TOOLS = (
    "INSERT INTO tool_totals (backend, tool, calls) VALUES ({p}, {p}, {p}) "
    "ON CONFLICT (backend, tool) DO UPDATE SET calls = tool_totals.calls + excluded.calls"
)


def count_query(
    query: TaskQuery, where: list[str], args: list[Any], mark: str
) -> tuple[str, list[Any]]:
    """How to count a query's matches: from the running totals when it filters only by
    status and agent (a few rows), else over its rows."""
    if query.parent_session_id is not None or query.text:
        return f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}", args
    sql = f"SELECT coalesce(sum(tasks), 0) FROM task_counts WHERE backend = {mark}"
    out: list[Any] = [query.backend]
    if query.statuses is not None:
        values = sorted(s.value for s in query.statuses)
        if not values:
            return "SELECT 0", []
        sql += f" AND status IN ({', '.join([mark] * len(values))})"
        out.extend(values)
    if query.agent is not None:
        sql += f" AND agent = {mark}"
        out.append(query.agent)
    return sql, out


def stats_from(
    counts: Sequence[Sequence[Any]], tools: Sequence[Sequence[Any]], durations: DurationSummary
) -> TaskStats:
    """The stats from (status, agent, tasks, unrecorded, ...) rows and (tool, calls) rows."""
    by_status = {s.value: 0 for s in TaskStatus}
    by_agent: dict[str, int] = {}
    total = unrecorded = 0
    for status, agent, count, missing, *_ in counts:
        by_status[status] = by_status.get(status, 0) + int(count)
        by_agent[agent] = by_agent.get(agent, 0) + int(count)
        total += int(count)
        unrecorded += int(missing)
    return TaskStats(
        tasks=total,
        by_status=by_status,
        by_agent=dict(sorted(by_agent.items())),
        tool_calls=sorted_tools({str(name): int(calls) for name, calls in tools}),
        tools_unrecorded=unrecorded,
        durations=durations,
    )
