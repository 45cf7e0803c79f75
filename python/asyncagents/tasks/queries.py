"""What a reader asks of the stored tasks (a filtered page, stats, recent changes) and the answers.

The stores answer these in their own query language (SQL with indexes on SQLite and PostgreSQL),
so a list, a search or the stats over 100,000 tasks never loads them all. The few values a query
needs from a task's JSON (its agent, the searchable text, the last turn's duration, tool calls
by name) are derived here, once, when a task is written: every store derives them the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .models import Task, TaskStatus, TaskUsage

SortField = Literal["created_at", "updated_at"]
#: how long a store remembers a cleared task for `changed_since` (ms): a reader that polls less
#: often than this may miss a clear
CLEARED_MEMORY_MS = 24 * 3600 * 1000
#: how much of each text a search looks at (its start): it bounds the searched column, so a
#: search scans a bounded size per task and a huge prompt costs no more than a long one
SEARCH_CHARS = 4000


class TaskQuery(BaseModel):
    """A filtered, sorted page of one backend's tasks; every filter given must hold."""

    model_config = ConfigDict(frozen=True)

    backend: str
    parent_session_id: str | None = None
    #: None: any status; empty: none
    statuses: frozenset[TaskStatus] | None = None
    agent: str | None = None
    #: a case-insensitive substring (`str.casefold`) of the id, description, prompt, result or
    #: error (of their first `SEARCH_CHARS` characters)
    text: str | None = None
    sort: SortField = "created_at"
    descending: bool = True
    limit: int = Field(default=100, ge=0)
    #: the (sort key, id) of the last task of the previous page: the page starts after it
    after: tuple[int, str] | None = None
    #: count every match (`TaskPage.total`); off, the store skips that scan
    count: bool = True

    @property
    def matches_nothing(self) -> bool:
        """A key or text holding NUL matches nothing on every store (none is stored)."""
        return has_nul(self.backend, self.parent_session_id, self.agent, self.text)

    def empty_page(self) -> TaskPage:
        return TaskPage(
            tasks=[],
            total=0 if self.count else None,
            usage=TaskUsage() if self.count else None,
        )


class TaskPage(BaseModel):
    """One page of a `TaskQuery`: its tasks, how many match in all, and whether more follow."""

    tasks: list[Task]
    #: every task matching the filters (all pages); None when not counted
    total: int | None
    #: tokens and cost of every task matching the filters (as stored); None when not counted
    usage: TaskUsage | None = None
    #: (sort key, id) of the page's last task when more follow (the next page's `after`)
    next_after: tuple[int, str] | None = None


class DurationSummary(BaseModel):
    """min, median, p95, max (ms) of ended turns; nulls when none ended."""

    count: int = 0
    min_ms: int | None = None
    median_ms: float | int | None = None
    p95_ms: int | None = None
    max_ms: int | None = None


class UsageSums(BaseModel):
    """Tokens and cost of tasks: in all, and by agent, model (``provider/model``), parent session
    and tree (top-level session); every agent, parent and tree of the tasks has its key."""

    total: TaskUsage = Field(default_factory=TaskUsage)
    by_agent: dict[str, TaskUsage] = Field(default_factory=dict)
    by_model: dict[str, TaskUsage] = Field(default_factory=dict)
    by_parent: dict[str, TaskUsage] = Field(default_factory=dict)
    by_tree: dict[str, TaskUsage] = Field(default_factory=dict)


class TaskStats(BaseModel):
    """Counts over one backend's tasks (of one parent, when asked)."""

    tasks: int
    by_status: dict[str, int]
    by_agent: dict[str, int]
    #: tool calls by name, over each task's last recorded turn
    tool_calls: dict[str, int]
    #: tasks whose tool calls by name were not recorded (ended before this was kept)
    tools_unrecorded: int
    durations: DurationSummary
    #: tokens and cost (as stored: a running turn's as of its last write)
    usage: UsageSums = Field(default_factory=UsageSums)


class TaskChanges(BaseModel):
    """What changed in the store since a time: tasks written and tasks cleared."""

    tasks: list[Task]
    cleared: list[str]


# -- derived values (one definition for every store) -----------------------------------------


def has_nul(*values: str | None) -> bool:
    """Whether a value holds NUL (PostgreSQL text cannot; the stores match it with nothing)."""
    return any(v is not None and "\x00" in v for v in values)


def no_nul(text: str) -> str:
    """`text` fit for a text column of every store: NUL becomes U+FFFD."""
    return text.replace("\x00", "\ufffd")


def search_text(task: Task) -> str:
    """What `TaskQuery.text` is looked for in: the start of each text, case-folded, one per
    line."""
    parts = (task.id, task.description, task.prompt, task.result or "", task.error or "")
    return no_nul("\n".join(p[:SEARCH_CHARS].casefold() for p in parts))


def matches(task: Task, query: TaskQuery) -> bool:
    """Whether `task` is one `query` selects (the reference the stores' SQL follows)."""
    return (
        task.backend == query.backend
        and (query.parent_session_id is None or task.parent_session_id == query.parent_session_id)
        and (query.statuses is None or task.status in query.statuses)
        and (query.agent is None or no_nul(task.agent) == query.agent)
        and (not query.text or query.text.casefold() in search_text(task))
    )


#: the decimals a summed cost keeps: sums kept by adding and taking away (the stores' running
#: totals) differ from a fresh sum by rounding noise far below a millionth of a cent
COST_DECIMALS = 12


def summed_usage(
    input_tokens: Any = 0,
    output_tokens: Any = 0,
    reasoning_tokens: Any = 0,
    cache_read_tokens: Any = 0,
    cache_write_tokens: Any = 0,
    cost: Any = 0.0,
) -> TaskUsage:
    """A sum of usages from its parts (SQL sums: None for no rows), the cost rounded to
    `COST_DECIMALS` (so every store gives the same sum)."""
    return TaskUsage(
        input_tokens=int(input_tokens or 0),
        output_tokens=int(output_tokens or 0),
        reasoning_tokens=int(reasoning_tokens or 0),
        cache_read_tokens=int(cache_read_tokens or 0),
        cache_write_tokens=int(cache_write_tokens or 0),
        cost=round(float(cost or 0.0), COST_DECIMALS) + 0.0,
    )


def add_usage(tasks: Sequence[Task]) -> TaskUsage:
    """The sum of `tasks`' usage (`summed_usage`)."""
    total = TaskUsage()
    for task in tasks:
        total = total + task.usage
    return summed_usage(**total.model_dump())


def usage_sums(tasks: Sequence[Task]) -> UsageSums:
    """Tokens and cost of tasks in hand (the reference for the SQL stores)."""
    groups: dict[str, dict[str, TaskUsage]] = {
        "by_agent": {},
        "by_model": {},
        "by_parent": {},
        "by_tree": {},
    }

    def add(group: str, key: str, usage: TaskUsage) -> None:
        sums = groups[group]
        sums[key] = sums.get(key, TaskUsage()) + usage

    for task in tasks:
        add("by_agent", no_nul(task.agent), task.usage)
        add("by_parent", task.parent_session_id, task.usage)
        add("by_tree", task.tree_id, task.usage)
        for model, usage in task.usage_by_model.items():
            add("by_model", model, usage)
    return UsageSums(
        total=add_usage(tasks),
        **{
            group: {k: summed_usage(**sums[k].model_dump()) for k in sorted(sums)}
            for group, sums in groups.items()
        },
    )


def sort_key(task: Task, field: SortField) -> int:
    return task.updated_at if field == "updated_at" else task.created_at


def turn_duration_ms(task: Task) -> int | None:
    """How long the task's last turn ran (launch: since creation; resume: since its start)."""
    if task.completed_at is None or task.status.active:
        return None
    start = task.created_at
    if task.resume_count > 0 and task.turn_started_at is not None:
        start = task.turn_started_at
    return max(0, task.completed_at - start)


def tools_unrecorded(task: Task) -> bool:
    """The task made tool calls whose names were not kept (stored by an older version)."""
    return task.progress.tool_calls > 0 and not task.progress.tools


def percentile_rank(count: int, fraction: float) -> int:
    """The 1-based nearest rank of `fraction` among `count` sorted values."""
    return max(1, math.ceil(fraction * count))


def percentile(sorted_values: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    return sorted_values[percentile_rank(len(sorted_values), fraction) - 1]


def duration_summary(durations: Sequence[int]) -> DurationSummary:
    """The summary of a list of durations (ms)."""
    values = sorted(durations)
    if not values:
        return DurationSummary()
    return DurationSummary(
        count=len(values),
        min_ms=values[0],
        median_ms=statistics.median(values),
        p95_ms=percentile(values, 0.95),
        max_ms=values[-1],
    )


def median_ranks(count: int) -> tuple[int, int]:
    """The 1-based ranks whose values' mean is the median of `count` sorted values."""
    return (count + 1) // 2, count // 2 + 1


def stats_of(tasks: Sequence[Task]) -> TaskStats:
    """The stats of tasks in hand (the in-memory store; the reference for the SQL ones)."""
    by_status = {s.value: 0 for s in TaskStatus}
    by_agent: dict[str, int] = {}
    tools: dict[str, int] = {}
    unrecorded = 0
    durations: list[int] = []
    for task in tasks:
        by_status[task.status.value] = by_status.get(task.status.value, 0) + 1
        agent = no_nul(task.agent)  # as the SQL stores keep it
        by_agent[agent] = by_agent.get(agent, 0) + 1
        for name, calls in task.progress.tools.items():
            tools[name] = tools.get(name, 0) + calls
        unrecorded += tools_unrecorded(task)
        duration = turn_duration_ms(task)
        if duration is not None:
            durations.append(duration)
    return TaskStats(
        tasks=len(tasks),
        by_status=by_status,
        by_agent=dict(sorted(by_agent.items())),
        tool_calls=sorted_tools(tools),
        tools_unrecorded=unrecorded,
        durations=duration_summary(durations),
        usage=usage_sums(tasks),
    )


def sorted_tools(tools: dict[str, int]) -> dict[str, int]:
    """Tool counts, most used first, then by name."""
    return dict(sorted(((k, v) for k, v in tools.items() if v), key=lambda kv: (-kv[1], kv[0])))
