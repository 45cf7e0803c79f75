"""One worker process of the multi-process store test (run by test_store_multiprocess.py).

``python store_worker.py sqlite|postgres <path-or-dsn> <owner>``: prints ``ready``, waits for a
line on stdin (so every worker starts at once), then, like a manager, keeps a lease, takes over
orphaned tasks of backend ``b1`` and completes each with a notice, and claims notices and
deletes them, until a round finds nothing to do. Prints one JSON line: the ids it took and the
notice ids it claimed.
"""

from __future__ import annotations

import asyncio
import json
import sys

from asyncagents.tasks.models import Notice, NoticeKind, Task, TaskStatus
from asyncagents.tasks.store import SQLiteTaskStore, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore


def complete(owner: str):  # type: ignore[no-untyped-def]
    def mutate(task: Task) -> tuple[Task, Notice | None] | None:
        if task.owner != owner or not task.status.active:
            return None
        task.status = TaskStatus.COMPLETED
        task.result = f"done by {owner}"
        notice = Notice(
            id=f"ntc_done_{task.id}",
            task_id=task.id,
            parent_session_id=task.parent_session_id,
            kind=NoticeKind.COMPLETED,
            turn=task.turn,
            text=task.result,
            backend=task.backend,
        )
        return task, notice

    return mutate


async def work(kind: str, target: str, owner: str) -> dict[str, list[str]]:
    store: TaskStore = SQLiteTaskStore(target) if kind == "sqlite" else PostgresTaskStore(target)
    await store.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    taken: list[str] = []
    claimed: list[str] = []
    idle_rounds = 0
    try:
        while idle_rounds < 3:
            await store.renew_lease(owner, "b1", ttl=600)
            tasks = await store.take_over(owner, "b1", limit=5)
            for task in tasks:
                taken.append(task.id)
                out = await store.update(task.id, complete(owner))
                assert out is not None, f"{owner} lost task {task.id} it had just taken"
            notices = await store.claim_notices(owner, "b1", claim_ttl=600, limit=10)
            for notice in notices:
                claimed.append(notice.id)
                await store.delete_notice(notice.id)
            idle_rounds = 0 if tasks or notices else idle_rounds + 1
            await asyncio.sleep(0.01 if idle_rounds else 0)
        await store.drop_lease(owner)
    finally:
        await store.close()
    return {"taken": taken, "claimed": claimed}


if __name__ == "__main__":
    result = asyncio.run(work(sys.argv[1], sys.argv[2], sys.argv[3]))
    print(json.dumps(result), flush=True)
