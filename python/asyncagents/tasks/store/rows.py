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

from ..models import Notice, Task, TaskStatus, TaskUsage
from ..queries import (
    COST_DECIMALS,
    DurationSummary,
    TaskQuery,
    TaskStats,
    UsageSums,
    no_nul,
    search_text,
    sorted_tools,
    summed_usage,
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


#: the usage columns of a task row and of the running totals, in `usage_values` order
USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
)
#: a `TaskUsage` as column values
UsageValues = tuple[int, int, int, int, int, float]


def usage_values(usage: TaskUsage) -> UsageValues:
    """`usage` as the values of `USAGE_COLUMNS`."""
    return (
        usage.input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cost,
    )


def derived(task: Task) -> tuple[Any, ...]:
    """The columns the queries read that come from a task's JSON: agent, updated_at, the last
    turn's duration, the searchable text, whether its tool names are missing, its tree (top-level
    session) and its usage (`USAGE_COLUMNS`)."""
    return (
        no_nul(task.agent),
        task.updated_at,
        turn_duration_ms(task),
        search_text(task),
        int(tools_unrecorded(task)),
        task.tree_id,
        *usage_values(task.usage),
    )


#: the names of `derived`'s columns, in its order
DERIVED_COLUMNS = (
    "agent",
    "updated_at",
    "duration_ms",
    "search",
    "tools_unrecorded",
    "root_session_id",
    *USAGE_COLUMNS,
)


def like_pattern(text: str) -> str:
    """A ``LIKE`` pattern (escape ``\\``) matching `text` anywhere, case-folded."""
    escaped = text.casefold().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


#: what a task's ``task_tools`` rows follow from: backend, parent, tool calls by name
ToolsKey = tuple[str, str, tuple[tuple[str, int], ...]]
#: what a task's ``task_models`` rows and its ``usage_totals`` rows follow from: backend, parent,
#: tree, usage by model
ModelsKey = tuple[str, str, str, tuple[tuple[str, UsageValues], ...]]
#: a row of ``task_counts``: (backend, status, agent)
CountKey = tuple[str, str, str]
#: a row of ``usage_totals``: (backend, kind, key); kind is ``parent``, ``tree`` or ``model``
UsageKey = tuple[str, str, str]


def tools_key(task: Task) -> ToolsKey:
    """What the tool rows of `task` depend on (rewritten only when it changes)."""
    return (task.backend, task.parent_session_id, tuple(sorted(task.progress.tools.items())))


def models_key(task: Task) -> ModelsKey:
    """What the model rows of `task` and its part of ``usage_totals`` depend on."""
    return (
        task.backend,
        task.parent_session_id,
        task.tree_id,
        tuple(sorted((m, usage_values(u)) for m, u in task.usage_by_model.items())),
    )


class Footprint(tuple[CountKey, tuple[Any, ...], ToolsKey, ModelsKey]):
    """What a stored task adds to the running totals (``task_counts``, ``tool_totals``,
    ``usage_totals``) and its tool and model rows: its count key, (1, tools unrecorded, has a
    duration, its usage), its `tools_key`, its `models_key`."""

    __slots__ = ()

    @classmethod
    def of(cls, task: Task) -> Footprint:
        counted = (
            1,
            int(tools_unrecorded(task)),
            int(turn_duration_ms(task) is not None),
            *usage_values(task.usage),
        )
        return cls(
            (
                (task.backend, task.status.value, no_nul(task.agent)),
                counted,
                tools_key(task),
                models_key(task),
            )
        )


#: changes of ``task_counts`` rows: key -> (tasks, unrecorded, timed, *usage)
CountDeltas = dict[CountKey, tuple[Any, ...]]
#: changes of ``tool_totals`` rows: (backend, tool) -> calls
ToolDeltas = dict[tuple[str, str], int]
#: changes of ``usage_totals`` rows: key -> (tasks, *usage)
UsageDeltas = dict[UsageKey, tuple[Any, ...]]


class Deltas(tuple[CountDeltas, ToolDeltas, UsageDeltas]):
    """How the running totals change: ``task_counts``, ``tool_totals``, ``usage_totals``."""

    __slots__ = ()


def _add(rows: dict[Any, list[Any]], key: Any, values: Sequence[Any], sign: int) -> None:
    row = rows.setdefault(key, [0] * len(values))
    for i, value in enumerate(values):
        row[i] += sign * value


def total_deltas(before: Footprint | None, after: Footprint | None) -> Deltas:
    """How the running totals change when a task's footprint goes from `before` to `after`
    (None: absent); only the rows that change, in key order (writers lock them in that order,
    so two never wait on each other in a cycle)."""
    counts: dict[Any, list[Any]] = {}
    tools: dict[tuple[str, str], int] = {}
    usage: dict[Any, list[Any]] = {}
    for footprint, sign in ((before, -1), (after, 1)):
        if footprint is None:
            continue
        key, counted, (backend, _, named), (_, parent, tree, models) = footprint
        _add(counts, key, counted, sign)
        for name, calls in named:
            tools[(backend, name)] = tools.get((backend, name), 0) + sign * calls
        task_usage = counted[3:]
        _add(usage, (backend, "parent", parent), (1, *task_usage), sign)
        _add(usage, (backend, "tree", tree), (1, *task_usage), sign)
        for model, model_usage in models:
            _add(usage, (backend, "model", model), (1, *model_usage), sign)
    return Deltas(
        (
            {k: tuple(v) for k, v in sorted(counts.items()) if any(v)},
            {k: v for k, v in sorted(tools.items()) if v},
            {k: tuple(v) for k, v in sorted(usage.items()) if any(v)},
        )
    )


def merged(many: Sequence[Deltas]) -> Deltas:
    """Several writes' changes of the running totals as one, in key order: a transaction that
    writes many tasks (an admission) takes the rows in the order every writer takes them."""
    counts: dict[Any, list[Any]] = {}
    tools: dict[tuple[str, str], int] = {}
    usage: dict[Any, list[Any]] = {}
    for each_counts, each_tools, each_usage in many:
        for key, values in each_counts.items():
            _add(counts, key, values, 1)
        for tool, calls in each_tools.items():
            tools[tool] = tools.get(tool, 0) + calls
        for key, values in each_usage.items():
            _add(usage, key, values, 1)
    return Deltas(
        (
            {k: tuple(v) for k, v in sorted(counts.items()) if any(v)},
            {k: v for k, v in sorted(tools.items()) if v},
            {k: tuple(v) for k, v in sorted(usage.items()) if any(v)},
        )
    )


_USAGE = ", ".join(USAGE_COLUMNS)
_SUMS = ", ".join(f"sum({c})" for c in USAGE_COLUMNS)
_NEG_SUMS = ", ".join(f"-sum({c})" for c in USAGE_COLUMNS)

#: the statements that rebuild the running totals from the tasks (migrations, bulk loads)
REBUILD_TOTALS = (
    "DELETE FROM task_counts",
    f"INSERT INTO task_counts (backend, status, agent, tasks, unrecorded, timed, {_USAGE}) "
    f"SELECT backend, status, agent, count(*), sum(tools_unrecorded), count(duration_ms), {_SUMS} "
    "FROM tasks GROUP BY backend, status, agent",
    "DELETE FROM tool_totals",
    "INSERT INTO tool_totals (backend, tool, calls) "
    "SELECT backend, tool, sum(calls) FROM task_tools GROUP BY backend, tool",
    "DELETE FROM usage_totals",
    f"INSERT INTO usage_totals (backend, kind, key, tasks, {_USAGE}) "
    f"SELECT backend, 'parent', parent_session_id, count(*), {_SUMS} FROM tasks "
    "GROUP BY backend, parent_session_id",
    f"INSERT INTO usage_totals (backend, kind, key, tasks, {_USAGE}) "
    f"SELECT backend, 'tree', root_session_id, count(*), {_SUMS} FROM tasks "
    "GROUP BY backend, root_session_id",
    f"INSERT INTO usage_totals (backend, kind, key, tasks, {_USAGE}) "
    f"SELECT backend, 'model', model, count(*), {_SUMS} FROM task_models GROUP BY backend, model",
)
_USAGE_TYPES = ", ".join(
    f"{c} {'DOUBLE PRECISION' if c == 'cost' else 'BIGINT'} NOT NULL DEFAULT 0"
    for c in USAGE_COLUMNS
)
#: the running totals' tables, the same on both SQL stores
TOTALS_TABLES = (
    "CREATE TABLE task_counts (backend TEXT NOT NULL, status TEXT NOT NULL, agent TEXT NOT NULL, "
    f"tasks BIGINT NOT NULL, unrecorded BIGINT NOT NULL, timed BIGINT NOT NULL, {_USAGE_TYPES}, "
    "PRIMARY KEY (backend, status, agent))",
    "CREATE TABLE tool_totals (backend TEXT NOT NULL, tool TEXT NOT NULL, calls BIGINT NOT NULL, "
    "PRIMARY KEY (backend, tool))",
    "CREATE TABLE usage_totals (backend TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, "
    f"tasks BIGINT NOT NULL, {_USAGE_TYPES}, PRIMARY KEY (backend, kind, key))",
)
#: a task's usage by model (the per-parent stats sum them), the same on both SQL stores
TASK_MODELS_TABLE = (
    "CREATE TABLE task_models (task_id TEXT NOT NULL, backend TEXT NOT NULL, "
    f"parent_session_id TEXT NOT NULL, model TEXT NOT NULL, {_USAGE_TYPES}, "
    "PRIMARY KEY (task_id, model))",
    "CREATE INDEX task_models_parent ON task_models (backend, parent_session_id)",
)
INSERT_MODEL = (
    f"INSERT INTO task_models (task_id, backend, parent_session_id, model, {_USAGE}) "
    "VALUES ({p}, {p}, {p}, {p}, " + ", ".join(["{p}"] * len(USAGE_COLUMNS)) + ")"
)
_ADDED = ", ".join(f"{c} = {{t}}.{c} + excluded.{c}" for c in USAGE_COLUMNS)
#: one change of a ``task_counts`` row (the `?`/`%s` placeholder is the store's)
ADD_COUNTS = (
    f"INSERT INTO task_counts (backend, status, agent, tasks, unrecorded, timed, {_USAGE}) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
    + ", ".join(["{p}"] * len(USAGE_COLUMNS))
    + ") ON CONFLICT (backend, status, agent) DO UPDATE SET "
    "tasks = task_counts.tasks + excluded.tasks, "
    "unrecorded = task_counts.unrecorded + excluded.unrecorded, "
    "timed = task_counts.timed + excluded.timed, " + _ADDED.replace("{t}", "task_counts")
)
ADD_TOOLS = (
    "INSERT INTO tool_totals (backend, tool, calls) VALUES ({p}, {p}, {p}) "
    "ON CONFLICT (backend, tool) DO UPDATE SET calls = tool_totals.calls + excluded.calls"
)
ADD_USAGE = (
    f"INSERT INTO usage_totals (backend, kind, key, tasks, {_USAGE}) "
    "VALUES ({p}, {p}, {p}, {p}, "
    + ", ".join(["{p}"] * len(USAGE_COLUMNS))
    + ") ON CONFLICT (backend, kind, key) DO UPDATE SET "
    "tasks = usage_totals.tasks + excluded.tasks, " + _ADDED.replace("{t}", "usage_totals")
)
#: a row of ``usage_totals`` no task counts in any more (a cleared parent, a model gone)
DROP_EMPTY_USAGE = (
    "DELETE FROM usage_totals WHERE backend = {p} AND kind = {p} AND key = {p} AND tasks = 0"
)


def removal_deltas(where: str, rows_where: str) -> tuple[str, str, tuple[str, ...]]:
    """The statements that read how the running totals change when the tasks `where` selects
    are deleted (`rows_where`: the same tasks' ``task_tools`` and ``task_models`` rows): count
    rows, tool rows, usage rows (`removed_deltas` reads them)."""
    counts = (
        "SELECT backend, status, agent, -count(*), -sum(tools_unrecorded), -count(duration_ms), "
        f"{_NEG_SUMS} FROM tasks WHERE {where} GROUP BY backend, status, agent"
    )
    tools = (
        f"SELECT backend, tool, -sum(calls) FROM task_tools WHERE {rows_where} "
        "GROUP BY backend, tool"
    )
    usage = (
        f"SELECT backend, 'parent', parent_session_id, -count(*), {_NEG_SUMS} FROM tasks "
        f"WHERE {where} GROUP BY backend, parent_session_id",
        f"SELECT backend, 'tree', root_session_id, -count(*), {_NEG_SUMS} FROM tasks "
        f"WHERE {where} GROUP BY backend, root_session_id",
        f"SELECT backend, 'model', model, -count(*), {_NEG_SUMS} FROM task_models "
        f"WHERE {rows_where} GROUP BY backend, model",
    )
    return counts, tools, usage


def removed_deltas(
    counts: Sequence[Sequence[Any]],
    tools: Sequence[Sequence[Any]],
    usage: Sequence[Sequence[Any]],
) -> Deltas:
    """`Deltas` from the rows `removal_deltas`' statements read (SQL sums may be decimals or
    None: counts become ints, the cost, last, a float)."""

    def numbers(values: Sequence[Any]) -> tuple[Any, ...]:
        *whole, cost = values
        return (*(int(v or 0) for v in whole), float(cost or 0.0))

    def key(row: Sequence[Any]) -> tuple[str, str, str]:
        return str(row[0]), str(row[1]), str(row[2])

    return Deltas(
        (
            {key(r): numbers(r[3:]) for r in sorted(counts, key=key)},
            {
                (str(r[0]), str(r[1])): int(r[2] or 0)
                for r in sorted(tools, key=lambda r: (str(r[0]), str(r[1])))
            },
            {key(r): numbers(r[3:]) for r in sorted(usage, key=key)},
        )
    )


def total_statements(deltas: Deltas, mark: str) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The statements (and their rows of arguments) that apply `deltas` to the running totals,
    in key order, then drop the ``usage_totals`` rows left empty."""
    counts, tools, usage = deltas
    out: list[tuple[str, list[tuple[Any, ...]]]] = [
        (ADD_COUNTS.format(p=mark), [(*k, *v) for k, v in counts.items()]),
        (ADD_TOOLS.format(p=mark), [(*k, v) for k, v in tools.items()]),
        (ADD_USAGE.format(p=mark), [(*k, *v) for k, v in usage.items()]),
        (DROP_EMPTY_USAGE.format(p=mark), [k for k, v in usage.items() if v[0] < 0]),
    ]
    return [(sql, rows) for sql, rows in out if rows]


def count_query(
    query: TaskQuery, where: list[str], args: list[Any], mark: str
) -> tuple[str, list[Any]]:
    """How to count a query's matches and sum their usage (one row: count, `USAGE_COLUMNS`):
    from the running totals when it filters only by status and agent (a few rows), else over
    its rows."""
    if query.parent_session_id is not None or query.text:
        return f"SELECT count(*), {_SUMS} FROM tasks WHERE {' AND '.join(where)}", args
    sql = f"SELECT coalesce(sum(tasks), 0), {_SUMS} FROM task_counts WHERE backend = {mark}"
    out: list[Any] = [query.backend]
    if query.statuses is not None:
        values = sorted(s.value for s in query.statuses)
        if not values:
            return "SELECT 0, 0, 0, 0, 0, 0, 0.0", []
        sql += f" AND status IN ({', '.join([mark] * len(values))})"
        out.extend(values)
    if query.agent is not None:
        sql += f" AND agent = {mark}"
        out.append(query.agent)
    return sql, out


def counted_page(row: Sequence[Any]) -> tuple[int, TaskUsage]:
    """The total and usage of a `count_query` row."""
    return int(row[0]), summed_usage(*row[1:])


#: the stats' count rows: (status, agent, tasks, unrecorded, timed, `USAGE_COLUMNS`) of the
#: totals, or of one parent's tasks
TOTAL_COUNTS = (
    f"SELECT status, agent, tasks, unrecorded, timed, {_USAGE} FROM task_counts "
    "WHERE backend = {p} AND tasks != 0"
)
PARENT_COUNTS = (
    "SELECT status, agent, count(*), sum(tools_unrecorded), count(duration_ms), "
    f"{_SUMS} FROM tasks WHERE backend = {{p}} AND parent_session_id = {{p}} "
    "GROUP BY status, agent"
)
#: the stats' usage rows: (kind, key, `USAGE_COLUMNS`) of the totals
TOTAL_USAGE = f"SELECT kind, key, {_USAGE} FROM usage_totals WHERE backend = {{p}} AND tasks > 0"
#: the same, of one parent's tasks (backend and parent given three times)
PARENT_USAGE = (
    f"SELECT 'parent', parent_session_id, {_SUMS} FROM tasks WHERE backend = {{p}} "
    "AND parent_session_id = {p} GROUP BY parent_session_id "
    f"UNION ALL SELECT 'tree', root_session_id, {_SUMS} FROM tasks WHERE backend = {{p}} "
    "AND parent_session_id = {p} GROUP BY root_session_id "
    f"UNION ALL SELECT 'model', model, {_SUMS} FROM task_models WHERE backend = {{p}} "
    "AND parent_session_id = {p} GROUP BY model"
)


def _usage_dict(values: Sequence[Any]) -> dict[str, Any]:
    """A `TaskUsage`'s fields from SQL sums of `USAGE_COLUMNS` (as `summed_usage` makes them)."""
    *tokens, cost = values
    names = USAGE_COLUMNS[:-1]
    out: dict[str, Any] = {name: int(v or 0) for name, v in zip(names, tokens, strict=True)}
    out["cost"] = round(float(cost or 0.0), COST_DECIMALS) + 0.0
    return out


def stats_from(
    counts: Sequence[Sequence[Any]],
    tools: Sequence[Sequence[Any]],
    durations: DurationSummary,
    usage: Sequence[Sequence[Any]],
) -> TaskStats:
    """The stats from `TOTAL_COUNTS` (or `PARENT_COUNTS`) rows, (tool, calls) rows and
    `TOTAL_USAGE` (or `PARENT_USAGE`) rows. The usage sums are validated as one document (a
    service may have thousands of parents: one model each would cost more than the query)."""
    by_status = {s.value: 0 for s in TaskStatus}
    by_agent: dict[str, int] = {}
    agent_usage: dict[str, list[Any]] = {}
    total = unrecorded = 0
    for status, agent, count, missing, _, *used in counts:
        by_status[status] = by_status.get(status, 0) + int(count)
        by_agent[agent] = by_agent.get(agent, 0) + int(count)
        total += int(count)
        unrecorded += int(missing)
        _add(agent_usage, agent, [v or 0 for v in used], 1)
    groups: dict[str, dict[str, Any]] = {"model": {}, "parent": {}, "tree": {}}
    for kind, key, inputs, outputs, reasoning, cache_read, cache_write, cost in usage:
        # thousands of rows (a key per parent): plain dicts, validated once below (SQL sums
        # of integers may be decimals; validation makes them ints)
        groups[kind][key] = {
            "input_tokens": inputs,
            "output_tokens": outputs,
            "reasoning_tokens": reasoning,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "cost": round(cost, COST_DECIMALS) + 0.0,
        }
    all_usage = [sum(values) for values in zip(*agent_usage.values(), strict=False)] or [0] * 6
    sums = UsageSums.model_validate(
        {
            "total": _usage_dict(all_usage),
            "by_agent": {k: _usage_dict(agent_usage[k]) for k in sorted(agent_usage)},
            "by_model": dict(sorted(groups["model"].items())),
            "by_parent": dict(sorted(groups["parent"].items())),
            "by_tree": dict(sorted(groups["tree"].items())),
        }
    )
    return TaskStats(
        tasks=total,
        by_status=by_status,
        by_agent=dict(sorted(by_agent.items())),
        tool_calls=sorted_tools({str(name): int(calls) for name, calls in tools}),
        tools_unrecorded=unrecorded,
        durations=durations,
        usage=sums,
    )
