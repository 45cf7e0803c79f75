"""Who follows which task: a lease per manager, renewed while it lives, and takeovers.

Each manager instance holds a lease row for its backend and renews it every ``lease_ttl / 3``.
The same loop asks the store to hand it the active tasks of its backend whose owner holds no
live lease (crashed, killed, or closed): ``take_over`` gives each such task to exactly one
caller, which then follows it as if it had launched it. ``close`` drops the lease, so another
manager takes over at once instead of after the lease time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from .models import Task
from .store import TaskStore

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews this manager's lease and takes over the tasks of dead owners, in its own loop."""

    def __init__(
        self,
        store: TaskStore,
        *,
        owner: str,
        backend_name: str,
        lease_ttl: float,
        on_taken: Callable[[list[Task]], Awaitable[None]],
    ) -> None:
        self._store = store
        self.owner = owner
        self.backend_name = backend_name
        self.lease_ttl = lease_ttl
        self._on_taken = on_taken
        self._loop_task: asyncio.Task[None] | None = None
        #: tasks taken over from other owners (for tests and benchmarks)
        self.taken_over = 0

    @property
    def interval(self) -> float:
        return self.lease_ttl / 3

    async def start(self) -> None:
        """Take the lease, adopt orphaned tasks once, then keep both going in the loop."""
        await self._store.renew_lease(self.owner, self.backend_name, self.lease_ttl)
        await self.take_over()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(
                self._run(), name="lease-keeper"
            )

    async def stop(self, *, drop_lease: bool = True) -> None:
        """Stop renewing; with `drop_lease`, let other managers take over at once."""
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if drop_lease:
            try:
                await self._store.drop_lease(self.owner)
            except Exception as exc:
                log.warning("dropping the lease of %s failed (it expires): %s", self.owner, exc)

    async def take_over(self) -> list[Task]:
        """Adopt the active tasks of this backend whose owner is dead; follow them."""
        taken = await self._store.take_over(self.owner, self.backend_name)
        if taken:
            self.taken_over += len(taken)
            log.info("%s took over %d task(s)", self.owner, len(taken))
            await self._on_taken(taken)
        return taken

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._store.renew_lease(self.owner, self.backend_name, self.lease_ttl)
                await self.take_over()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lease renewal or takeover failed (retried): %s", exc)
