"""The contract every task store keeps, whatever holds the rows (a dict, SQLite, PostgreSQL).

Every method is async: a store that does blocking I/O runs it off the event loop, so a large
write never stalls other tasks. Guarantees shared by all stores:

- every change of a task goes through `update`, a read-modify-write in one transaction with the
  row locked, so concurrent writers (coroutines, threads, processes, hosts) never see or leave a
  torn record, and a state change and the notice it produces are saved together or not at all;
- ownership: each manager instance keeps a lease (`renew_lease`); `take_over` hands the queued
  and active tasks of owners without a live lease to one caller, never to two;
- admission: `admit` counts the running tasks under every cap, picks queued tasks in fair order
  and marks them running in one transaction, serialised with every other `admit` of the
  backend: no cap is exceeded, whatever the number of callers;
- notices are claimed (`claim_notices`) before delivery with a claim that expires, so two
  managers never deliver the same notice while its claim lives;
- a row that cannot be loaded (garbage JSON, wrong types) is skipped with a logged warning by
  every listing, and `get`/`update`/`find_by_session` treat it as absent: one bad row never
  makes a store unusable (`ids_with_prefix` reads only ids, so it still lists its id, and
  `delete_parent` removes it with its parent);
- a key (id, session, parent, backend, owner) holding a NUL character matches nothing on every
  store: a lookup finds nothing (PostgreSQL text cannot hold NUL; it cannot store one either);
- failures of the underlying database raise `StoreError` naming the file or DSN;
- lists, searches, stats and change polls (`query_tasks`, `task_stats`, `changed_since`) run in
  the store on indexed columns derived from each task when it is written (`queries`), so their
  cost follows the page, not the number of stored tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from ..admission import FRESH_MS, Caps, Entry, Include
from ..models import Notice, Task, TaskStatus
from ..queries import TOP_DEFAULT, TaskChanges, TaskPage, TaskQuery, TaskStats

#: `update`'s callback: the new task and an optional notice to save with it in the same
#: transaction, or None to leave the row unchanged. Sync and quick, without I/O: it runs while the
#: row is locked (for SQLite in the store's worker thread), and an exception it raises rolls the
#: transaction back and passes through unchanged
Mutation = Callable[[Task], "tuple[Task, Notice | None] | None"]

#: statuses whose task has a turn running: the ones an owner follows
ACTIVE_STATUSES: frozenset[TaskStatus] = frozenset(s for s in TaskStatus if s.active)
#: statuses whose task has work to do (queued or running): the ones `take_over` hands on
PENDING_STATUSES: frozenset[TaskStatus] = frozenset(s for s in TaskStatus if s.pending)


@dataclass(frozen=True)
class TaskCost:
    """What a tree's budget reads of one task (`TaskStore.tree_costs`)."""

    id: str
    session_id: str | None
    cost: float


@dataclass
class QueueView:
    """A backend's queued and running tasks as admission sees them, and each parent's last
    admission key (see `admission`)."""

    entries: list[Entry] = field(default_factory=list)
    last_admitted: dict[str, int] = field(default_factory=dict)


class TaskStore(Protocol):
    """Persistence of tasks, manager leases and pending notices (guarantees: module docstring)."""

    async def open(self) -> None:
        """Connect; create or migrate the schema; `StoreError` if the database is not ours.

        Idempotent: a second call on an open store does nothing.
        """

    async def close(self) -> None:
        """Release connections and threads; the store can be opened again."""

    async def insert(self, task: Task) -> None:
        """Store a new task; `StoreError` if it cannot be written (or its id exists)."""

    async def get(self, task_id: str) -> Task | None:
        """The task, or None."""

    async def ids_with_prefix(
        self, prefix: str, parent_session_id: str | None = None, limit: int = 2
    ) -> list[str]:
        """Up to `limit` task ids starting with `prefix` (sorted), of one parent when given."""

    async def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        """Atomically apply `mutate` to the stored task; None if absent (or unloadable) or
        `mutate` declined."""

    async def list_tasks(
        self,
        parent_session_id: str | None = None,
        statuses: Collection[TaskStatus] | None = None,
        *,
        backend: str | None = None,
        owner: str | None = None,
    ) -> list[Task]:
        """Tasks, newest first, filtered by every argument given."""

    async def query_tasks(self, query: TaskQuery) -> TaskPage:
        """One page of the tasks `query` selects, in its order, after its cursor (keyset paging:
        stable under inserts); run in the store (indexes), never over every task in Python."""

    async def task_stats(
        self, backend: str, parent_session_id: str | None = None, top: int = TOP_DEFAULT
    ) -> TaskStats:
        """Counts by status and agent, tool calls by name, last-turn durations and usage of a
        backend's tasks (of one parent when given), computed in the store; the usage of the
        `top` first parents and trees by cost (`queries.rank`) and the counts of all."""

    async def changed_since(self, backend: str, since: int) -> TaskChanges:
        """A backend's tasks whose ``updated_at`` is ``>= since`` (oldest change first) and the
        ids of its tasks cleared at or after `since` (remembered for `CLEARED_MEMORY_MS`)."""

    async def find_by_session(self, session_id: str) -> Task | None:
        """The newest task whose child session is `session_id`."""

    async def delete_parent(self, parent_session_id: str, backend: str | None = None) -> list[Task]:
        """Remove a parent's tasks and pending notices (of `backend` only, when given).

        Returns the removed tasks, newest first.
        """

    async def renew_lease(self, owner: str, backend: str, ttl: float) -> None:
        """Create or extend `owner`'s lease to now + `ttl` seconds."""

    async def drop_lease(self, owner: str) -> None:
        """End `owner`'s lease now (graceful close): others may take its tasks over at once."""

    async def take_over(self, owner: str, backend: str, limit: int = 500) -> list[Task]:
        """Give `owner` up to `limit` queued or active tasks of `backend` whose owner has no
        live lease.

        Tasks with no owner count as unowned; `owner`'s own tasks are not returned. Atomic: two
        callers never get the same task. Call `renew_lease` first, or a third manager may take
        the tasks on from an owner whose own lease is missing.
        """

    async def queue_view(self, backend: str) -> QueueView:
        """The queued and running tasks of `backend` (a snapshot, for a queued task's place)."""

    async def tree_costs(self, parent_session_ids: Collection[str]) -> list[TaskCost]:
        """The id, child session and cost (``usage.cost``) of every task of these parent
        sessions, whatever their backend: a tree's spend (`guards.TreeSpend`), read from
        indexed columns (no record is loaded), one level of the tree per call."""

    async def queued_ahead(self, task: Task) -> int:
        """How many queued tasks of `task`'s parent, on its backend, are before it in its
        parent's queue (created earlier: ``(created_at, id)`` smaller), whoever stored them.

        Counted in the store over the parent's queued tasks only (an index of the queued tasks
        by backend and parent in SQL), so the cost follows that parent's queue, not the number
        of stored tasks: `TaskManager.task` asks it for every new task.
        """

    async def admit(
        self,
        backend: str,
        caps: Caps,
        owner: str,
        limit: int = 100,
        *,
        include: Include = None,
        fresh_ms: int = FRESH_MS,
    ) -> list[Task]:
        """Start up to `limit` queued tasks of `backend` that every cap of `caps` lets run.

        One transaction, serialised with every other `admit` on the backend: count the running
        tasks (running and resumed, whoever owns them), pick queued tasks whose fork is prepared
        (and those of `include`, tasks whose fork its caller is preparing), except those another
        manager queued less than `fresh_ms` ago or whose manager is dead (taken over first),
        in fair order (`admission.plan`); mark them running (a follow-up: resumed)
        with `owner` as their owner and `admitted_at` now, and remember each parent's turn.
        Returns them in the order they were admitted.
        """

    async def delete_queued(self, task_id: str) -> Task | None:
        """Remove a task (and its notices) only while it is queued; the task, or None if it is
        gone or no longer queued (admitted meanwhile: it stays)."""

    async def descendants(self, session_id: str) -> list[Task]:
        """Every task under `session_id`: its tasks, their child sessions' tasks, and so on
        (oldest first). For a task's own descendants, pass its child session."""

    async def notices(
        self, parent_session_id: str | None = None, *, backend: str | None = None
    ) -> list[Notice]:
        """Pending notices (claimed or not), oldest first, filtered by every argument given."""

    async def claim_notices(
        self,
        owner: str,
        backend: str,
        claim_ttl: float,
        *,
        parent_session_id: str | None = None,
        limit: int = 100,
    ) -> list[Notice]:
        """Claim up to `limit` due notices of `backend`, oldest first, for `claim_ttl` seconds.

        Due: ``next_attempt_at <= now``, and unclaimed or with an expired claim. Atomic: two
        callers never hold a claim on the same notice at once. The returned notices carry the
        claim (`claimed_by`, `claim_expires_at`).
        """

    async def release_notice(self, notice: Notice) -> None:
        """After a failed delivery: save `attempts`, `last_error`, `next_attempt_at`; unclaim.

        Only if the stored notice is still claimed by ``notice.claimed_by`` (a claim that expired
        and was taken by another manager is left alone).
        """

    async def delete_notice(self, notice_id: str) -> None:
        """Forget a delivered (or undeliverable) notice; nothing if it is gone already."""
