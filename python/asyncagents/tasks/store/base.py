"""The contract every task store keeps, whatever holds the rows (a dict, SQLite, PostgreSQL).

Every method is async: a store that does blocking I/O runs it off the event loop, so a large
write never stalls other tasks. Guarantees shared by all stores:

- every change of a task goes through `update`, a read-modify-write in one transaction with the
  row locked, so concurrent writers (coroutines, threads, processes, hosts) never see or leave a
  torn record, and a state change and the notice it produces are saved together or not at all;
- ownership: each manager instance keeps a lease (`renew_lease`); `take_over` hands the active
  tasks of owners without a live lease to one caller, never to two;
- notices are claimed (`claim_notices`) before delivery with a claim that expires, so two
  managers never deliver the same notice while its claim lives;
- a row that cannot be loaded (garbage JSON, wrong types) is skipped with a logged warning by
  every listing, and `get`/`update`/`find_by_session` treat it as absent: one bad row never
  makes a store unusable (`ids_with_prefix` reads only ids, so it still lists its id, and
  `delete_parent` removes it with its parent);
- a key (id, session, parent, backend, owner) holding a NUL character matches nothing on every
  store: a lookup finds nothing (PostgreSQL text cannot hold NUL; it cannot store one either);
- failures of the underlying database raise `StoreError` naming the file or DSN.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from ..models import Notice, Task, TaskStatus

#: `update`'s callback: the new task and an optional notice to save with it in the same
#: transaction, or None to leave the row unchanged. Sync and quick, without I/O: it runs while the
#: row is locked (for SQLite in the store's worker thread), and an exception it raises rolls the
#: transaction back and passes through unchanged
Mutation = Callable[[Task], "tuple[Task, Notice | None] | None"]

#: statuses whose task has a turn running: the ones an owner follows and `take_over` hands on
ACTIVE_STATUSES: frozenset[TaskStatus] = frozenset(s for s in TaskStatus if s.active)


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
        """Give `owner` up to `limit` active tasks of `backend` whose owner has no live lease.

        Tasks with no owner count as unowned; `owner`'s own tasks are not returned. Atomic: two
        callers never get the same task. Call `renew_lease` first, or a third manager may take
        the tasks on from an owner whose own lease is missing.
        """

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
