"""Which queued tasks start next: every cap counted, FIFO within a parent, round robin across
parents, and a task a cap holds back skipped, not blocking the others ("FIFO with skip").

Pure functions over a snapshot of one backend's queued and running tasks. Every store runs
`plan` inside the one transaction (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock, the
in-memory store's lock) that reads the snapshot and marks the chosen tasks running, so no cap is
exceeded whatever the number of workers and hosts.

Round robin needs a memory: the store keeps, per parent, the key of its last admission
(`turn_keys`). The parent served longest ago goes first (a parent never served before goes
before all others); ties go to the parent whose oldest queued task is oldest.

A queued task belongs to the manager that queued it (or took it over) only loosely: while that
manager lives, it is left to it for a while (`fresh_ms`, the managers' lease time: it admits its
new tasks itself, right after storing them, so with room under the caps the manager that was
asked for a task follows it), and after that any live manager may admit it. A task whose
manager died is taken over first, like a running one (`TaskStore.take_over`: a dead manager's
lease looks alive until it expires, hence the lease time), then admitted by its new owner.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .models import Task, TaskStatus, now_ms

if TYPE_CHECKING:
    from .config import TaskManagerConfig

#: the per-model cap key of tasks that run on the server's default model
DEFAULT_MODEL_KEY = "default"
#: how long a new task is left to the manager that queued it (ms), unless told otherwise
FRESH_MS = 30_000


#: tasks a caller is preparing (their session, their fork) that `admit` may start all the same:
#: one id, several, or none
Include = str | Collection[str] | None


def included(include: Include) -> frozenset[str]:
    """The ids `include` names."""
    if include is None:
        return frozenset()
    if isinstance(include, str):
        return frozenset((include,))
    return frozenset(include)


def model_key(model: str | None) -> str:
    """The key of `max_running_per_model` a task with this model counts under."""
    return model or DEFAULT_MODEL_KEY


@dataclass(frozen=True)
class Caps:
    """The caps admission keeps; None or a missing key: no cap."""

    max_running: int | None = None
    per_parent: int | None = None
    per_agent: Mapping[str, int] = field(default_factory=dict)
    per_model: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: TaskManagerConfig) -> Caps:
        return cls(
            max_running=config.max_running,
            per_parent=config.max_running_per_parent,
            per_agent=dict(config.max_running_per_agent),
            per_model=dict(config.max_running_per_model),
        )


@dataclass(frozen=True)
class Entry:
    """One queued or running task of the backend, as admission sees it."""

    id: str
    parent: str
    agent: str
    model: str | None
    created_at: int
    running: bool
    #: a queued task that may start (False while its session is created or its fork context
    #: prepared: `Task.ready`)
    ready: bool = True
    #: the manager that queued it (or follows it), and whether its lease lives
    owner: str | None = None
    owner_live: bool = True
    #: a try again after a provider error waits out its backoff: not started before this
    #: time (epoch ms; None: at once)
    not_before: int | None = None


@dataclass(frozen=True)
class Blocker:
    """A cap that holds a queued task back: its option name, what runs under it, the cap."""

    name: str
    running: int
    cap: int
    #: what the cap counts, for a text: "on this server", "for this session"...
    scope: str


@dataclass
class Counts:
    """Running tasks under each cap."""

    total: int = 0
    by_parent: Counter[str] = field(default_factory=Counter)
    by_agent: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Counts:
        counts = cls()
        for entry in entries:
            if entry.running:
                counts.add(entry)
        return counts

    def add(self, entry: Entry) -> None:
        self.total += 1
        self.by_parent[entry.parent] += 1
        self.by_agent[entry.agent] += 1
        self.by_model[model_key(entry.model)] += 1

    def blockers(self, entry: Entry, caps: Caps) -> list[Blocker]:
        """Every cap that is full for `entry`, widest first."""
        out = []
        if caps.max_running is not None and self.total >= caps.max_running:
            out.append(Blocker("max_running", self.total, caps.max_running, "on this server"))
        parent = self.by_parent[entry.parent]
        if caps.per_parent is not None and parent >= caps.per_parent:
            out.append(
                Blocker("max_running_per_parent", parent, caps.per_parent, "for this session")
            )
        agent_cap = caps.per_agent.get(entry.agent)
        if agent_cap is not None and self.by_agent[entry.agent] >= agent_cap:
            out.append(
                Blocker(
                    "max_running_per_agent",
                    self.by_agent[entry.agent],
                    agent_cap,
                    f"with agent {entry.agent}",
                )
            )
        key = model_key(entry.model)
        model_cap = caps.per_model.get(key)
        if model_cap is not None and self.by_model[key] >= model_cap:
            out.append(
                Blocker("max_running_per_model", self.by_model[key], model_cap, f"on model {key}")
            )
        return out


def _queues(
    entries: Iterable[Entry],
    *,
    ready_only: bool,
    include: Include = None,
    me: str | None = None,
    fresh_since: int | None = None,
    now: int | None = None,
) -> dict[str, deque[Entry]]:
    preparing = included(include)

    def startable(e: Entry) -> bool:
        if not ready_only:
            return True
        if now is not None and e.not_before is not None and e.not_before > now:
            return False  # its backoff is not over: skipped, the others go on
        if fresh_since is not None and e.owner not in (None, me):
            if not e.owner_live:
                return False  # its manager died: taken over first (then its new owner's)
            if e.created_at > fresh_since:
                return False  # just queued by another manager: left to it for a moment
        return e.ready or e.id in preparing

    queued = sorted(
        (e for e in entries if not e.running and startable(e)),
        key=lambda e: (e.created_at, e.id),
    )
    queues: dict[str, deque[Entry]] = {}
    for entry in queued:
        queues.setdefault(entry.parent, deque()).append(entry)
    return queues


def _rotation(queues: Mapping[str, deque[Entry]], last: Mapping[str, int]) -> list[str]:
    """Parents in serving order: served longest ago (or never) first, then oldest head."""
    return sorted(
        queues,
        key=lambda p: (last.get(p, -1), queues[p][0].created_at, queues[p][0].id, p),
    )


def plan(
    entries: Iterable[Entry],
    last_admitted: Mapping[str, int],
    caps: Caps,
    limit: int,
    include: Include = None,
    me: str | None = None,
    fresh_since: int | None = None,
    now: int | None = None,
) -> list[Entry]:
    """The queued tasks manager `me` starts now, in the order it admits them (at most `limit`).

    Only ready tasks start, and those of `include` (tasks the caller is preparing: their
    session, their fork); a task another manager queued after `fresh_since` (ms) is left to
    it, and a try again whose backoff ends after `now` (ms) waits (neither blocks the tasks
    behind it).
    """
    entries = list(entries)
    counts = Counts.of(entries)
    queues = _queues(
        entries, ready_only=True, include=include, me=me, fresh_since=fresh_since, now=now
    )
    rotation = _rotation(queues, last_admitted)
    chosen: list[Entry] = []

    def room() -> bool:
        return len(chosen) < limit and (caps.max_running is None or counts.total < caps.max_running)

    while rotation and room():
        for parent in list(rotation):
            if not room():
                break
            queue = queues[parent]
            pick = next((e for e in queue if not counts.blockers(e, caps)), None)
            if pick is None:
                # every one of its tasks is held back by a cap (its own, an agent's, a model's)
                rotation.remove(parent)
                continue
            queue.remove(pick)
            counts.add(pick)
            chosen.append(pick)
            if not queue:
                rotation.remove(parent)
    return chosen


def fair_order(entries: Iterable[Entry], last_admitted: Mapping[str, int]) -> list[Entry]:
    """Every queued task (ready or not) in the order it would start with no cap in the way."""
    queues = _queues(entries, ready_only=False)
    rotation = _rotation(queues, last_admitted)
    out: list[Entry] = []
    while rotation:
        for parent in list(rotation):
            queue = queues[parent]
            out.append(queue.popleft())
            if not queue:
                rotation.remove(parent)
    return out


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued task stands: its place, how many run, and what holds it back."""

    position: int
    queued: int
    running: int
    #: the caps that are full for it now, widest first (none: it waits for its turn or fork)
    blockers: tuple[Blocker, ...]
    ready: bool


def place_of(
    task_id: str, entries: Iterable[Entry], last_admitted: Mapping[str, int], caps: Caps
) -> QueuePlace | None:
    """`task_id`'s place in the queue, or None if it is not queued."""
    entries = list(entries)
    order = fair_order(entries, last_admitted)
    for index, entry in enumerate(order):
        if entry.id == task_id:
            counts = Counts.of(entries)
            return QueuePlace(
                position=index + 1,
                queued=len(order),
                running=counts.total,
                blockers=tuple(counts.blockers(entry, caps)),
                ready=entry.ready,
            )
    return None


def turn_keys(now_ms: int, count: int, last_admitted: Mapping[str, int]) -> list[int]:
    """The `last_admitted` keys of `count` admissions made at `now_ms`, in their order: after
    every key given before (even from a host whose clock is behind), and increasing."""
    base = max(now_ms * 1000, max(last_admitted.values(), default=0) + 1)
    return [base + i for i in range(count)]


def admitted(task: Task, owner: str, at: int, include: Include = None) -> Task | None:
    """`task` leaving the queue: running (a follow-up: resumed), followed by `owner`; None if
    it is not a queued task that may start (ready, or in `include`). Only the stores' `admit`
    calls it, inside the transaction that counted the caps."""
    if task.status is not TaskStatus.QUEUED or (
        not task.ready and task.id not in included(include)
    ):
        return None
    task.status = TaskStatus.RESUMED if task.resume_count > 0 else TaskStatus.RUNNING
    task.owner = owner
    task.admitted_at = at
    task.turn_started_at = None
    # `updated_at` only grows, as with every change (see `transitions`)
    task.updated_at = max(now_ms(), task.updated_at + 1)
    return task


def choose(
    entries: Iterable[Entry],
    last_admitted: Mapping[str, int],
    caps: Caps,
    limit: int,
    *,
    include: Include,
    me: str,
    now: int,
    fresh_ms: int = FRESH_MS,
) -> list[Entry]:
    """`plan` as a store's `admit` runs it for manager `me` at `now` (ms)."""
    return plan(
        entries,
        last_admitted,
        caps,
        max(limit, 0),
        include,
        me=me,
        fresh_since=now - fresh_ms,
        now=now,
    )
