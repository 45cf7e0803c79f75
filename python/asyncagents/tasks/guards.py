"""Runaway guards: the limits a running turn is held to, and the reason a tripped one gives.

Each limit is a `TaskManagerConfig` field (None: off); the `asyncagents_task` call may lower the
count and spend limits of one task (`TaskLimits`), never raise them. The watcher checks them on
every check of a run (events and the periodic reconciliation trigger checks), and only for a turn
whose prompt was accepted: a task waiting to start is never stopped by a guard that counts
running time. A tripped guard ends the turn in ``error`` with `Task.error` set to its reason
(the texts below), aborts the child session, and the parent gets the one notice of that end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .config import TaskManagerConfig
from .errors import TaskRequestError
from .models import Task, TaskLimits, TaskUsage
from .store import TaskStore
from .usage import usd


def seconds(value: float) -> str:
    """Seconds as the texts show them: ``300``, ``2.5``."""
    return f"{value:g}"


def idle_reason(limit: float) -> str:
    """No message, part or tool progress for `limit` s while the server said busy."""
    return f"stopped: no progress for {seconds(limit)} s while busy (idle_timeout)"


def runtime_reason(limit: float) -> str:
    """The turn ran for `limit` s."""
    return f"stopped: the turn ran for {seconds(limit)} s (max_runtime)"


def tool_calls_reason(calls: int, limit: int) -> str:
    """The turn made more tool calls than allowed."""
    return f"stopped: {calls} tool calls in this turn, over {limit} (max_tool_calls)"


def tokens_reason(tokens: int, limit: int) -> str:
    """The task used more tokens than allowed."""
    return f"stopped: {tokens:,} tokens used, over {limit:,} (max_tokens)"


def cost_reason(cost: float, limit: float) -> str:
    """The task cost more than allowed."""
    return f"stopped: the task cost {usd(cost)}, over {usd(limit)} (max_cost)"


def tree_cost_reason(root: str, cost: float, limit: float) -> str:
    """The tasks of one top-level session cost more than allowed together."""
    return (
        f"stopped: the tasks of session `{root}` cost {usd(cost)} together, over {usd(limit)} "
        "(max_cost)"
    )


@dataclass(frozen=True)
class Limits:
    """The limits one task's turns are held to (None: no limit)."""

    max_runtime: float | None
    idle_timeout: float | None
    max_tool_calls: int | None
    max_cost: float | None
    max_tokens: int | None
    #: the config's max_cost: the limit of the task's whole tree
    tree_max_cost: float | None


def _lower(config: float | None, asked: float | None) -> float | None:
    if asked is None:
        return config
    return asked if config is None else min(config, asked)


def limits_of(config: TaskManagerConfig, task: Task) -> Limits:
    """The config's limits, lowered by what the task's call asked for."""
    asked = task.limits
    tool_calls = _lower(config.max_tool_calls, asked.max_tool_calls)
    tokens = _lower(config.max_tokens, asked.max_tokens)
    return Limits(
        max_runtime=_lower(config.max_runtime, asked.max_runtime),
        idle_timeout=config.idle_timeout,
        max_tool_calls=None if tool_calls is None else int(tool_calls),
        max_cost=_lower(config.max_cost, asked.max_cost),
        max_tokens=None if tokens is None else int(tokens),
        tree_max_cost=config.max_cost,
    )


def checked_limits(config: TaskManagerConfig, asked: TaskLimits | None) -> TaskLimits:
    """The limits a call asked for, refused (`TaskRequestError`) when one is above the
    config's: a call may only lower a limit."""
    if asked is None:
        return TaskLimits()
    for name in ("max_runtime", "max_tool_calls", "max_cost", "max_tokens"):
        value = getattr(asked, name)
        ceiling = getattr(config, name)
        if value is not None and ceiling is not None and value > ceiling:
            raise TaskRequestError(
                f"{name}={value:g} is above this service's limit of {ceiling:g}; a task can "
                f"only lower it. Leave {name} out, or give at most {ceiling:g}."
            )
    return asked


def count_reason(limits: Limits, tool_calls: int, usage: TaskUsage) -> str | None:
    """The reason a guard on counts trips (tool calls, tokens, the task's cost), or None."""
    if limits.max_tool_calls is not None and tool_calls > limits.max_tool_calls:
        return tool_calls_reason(tool_calls, limits.max_tool_calls)
    if limits.max_tokens is not None and usage.tokens > limits.max_tokens:
        return tokens_reason(usage.tokens, limits.max_tokens)
    if limits.max_cost is not None and usage.cost > limits.max_cost:
        return cost_reason(usage.cost, limits.max_cost)
    return None


def runtime_exceeded(limits: Limits, started_at_ms: int | None, now_ms: int) -> str | None:
    """The max_runtime reason when the turn started `max_runtime` s ago or more, else None."""
    if limits.max_runtime is None or started_at_ms is None:
        return None
    if now_ms - started_at_ms >= limits.max_runtime * 1000:
        return runtime_reason(limits.max_runtime)
    return None


class TreeSpend:
    """The stored cost of each tree's tasks, read at most once per `ttl` s per tree (and
    again after `forget`: this manager stored a new cost in the tree).

    Only tasks of depth below `max_depth` may have started tasks of their own, so only their
    sessions are looked under (with the default depth 1, a tree is one indexed read).
    """

    def __init__(self, store: TaskStore, ttl: float, max_depth: int = 1) -> None:
        self._store = store
        self._ttl = ttl
        self._max_depth = max(1, max_depth)
        self._cache: dict[str, tuple[float, dict[str, float]]] = {}
        self._reading: dict[str, asyncio.Future[dict[str, float]]] = {}

    async def cost(self, task: Task, live: TaskUsage) -> float:
        """The cost of every task of `task`'s tree, `task` itself counted as `live`."""
        costs = await self._costs(task.tree_id)
        return sum(c for tid, c in costs.items() if tid != task.id) + live.cost

    async def total(self, root: str) -> float:
        """The stored cost of every task of the tree of `root`, read now."""
        self.forget(root)
        return sum((await self._costs(root)).values())

    def forget(self, root: str) -> None:
        """The costs of the tree of `root` changed: read them again at the next question."""
        self._cache.pop(root, None)

    async def _costs(self, root: str) -> dict[str, float]:
        now = time.monotonic()
        cached = self._cache.get(root)
        if cached is not None and cached[0] > now:
            return cached[1]
        reading = self._reading.get(root)
        if reading is None:
            reading = asyncio.ensure_future(self._read(root))
            self._reading[root] = reading
            try:
                costs = await asyncio.shield(reading)
            finally:
                self._reading.pop(root, None)
            self._cache[root] = (time.monotonic() + self._ttl, costs)
            if len(self._cache) > 1000:  # bounded: the oldest entries go first
                for key in list(self._cache)[:500]:
                    del self._cache[key]
            return costs
        return await asyncio.shield(reading)

    async def _read(self, root: str) -> dict[str, float]:
        """Task id -> cost of the tasks under `root`, level by level (parents are indexed):
        one store read per level, of three columns (`TaskStore.tree_costs`), whatever the
        number of tasks."""
        costs: dict[str, float] = {}
        level = [root]
        for depth in range(1, self._max_depth + 1):
            below: list[str] = []
            for task in await self._store.tree_costs(level):
                if task.id in costs:
                    continue
                costs[task.id] = task.cost
                if task.session_id and depth < self._max_depth:
                    below.append(task.session_id)
            if not below:
                break
            level = below
        return costs
