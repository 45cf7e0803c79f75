"""`FlakyStore`: an `InMemoryTaskStore` whose writes fail on demand, as a full disk would."""

from __future__ import annotations

from asyncagents.tasks import InMemoryTaskStore, StoreError, Task
from asyncagents.tasks.models import Notice
from asyncagents.tasks.store import Mutation


class FlakyStore(InMemoryTaskStore):
    """`fail_inserts` / `fail_updates`: how many of the next calls raise `StoreError`
    (-1: all of them until reset). With `spare_new_sessions`, an update of a task with no
    session yet (the record of its new child session) does not fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_inserts = 0
        self.fail_updates = 0
        self.spare_new_sessions = False
        self.failed = 0

    def _fails(self, name: str) -> bool:
        left: int = getattr(self, name)
        if left == 0:
            return False
        if left > 0:
            setattr(self, name, left - 1)
        self.failed += 1
        return True

    async def insert(self, task: Task) -> None:
        if self._fails("fail_inserts"):
            raise StoreError("memory store: insert failed (test knob: disk full)")
        await super().insert(task)

    async def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        stored = self._tasks.get(task_id)
        spared = self.spare_new_sessions and stored is not None and stored.session_id is None
        if not spared and self._fails("fail_updates"):
            raise StoreError("memory store: update failed (test knob: disk full)")
        return await super().update(task_id, mutate)
