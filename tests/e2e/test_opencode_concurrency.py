"""Many tasks at once against a real ``opencode serve``: none lost, one notice each."""

from __future__ import annotations

import asyncio

from asyncagents.tasks import OpenCodeBackend, TaskManager, TaskStatus
from e2e_support import AGENT, until
from parent_notices import notices_in

TASKS = 50
PARENTS = 5


async def test_fifty_concurrent_tasks_all_complete_once(
    manager: TaskManager, backend: OpenCodeBackend
) -> None:
    parents = [
        str((await backend.create_session(title=f"parent {p}"))["id"]) for p in range(PARENTS)
    ]
    loop = asyncio.get_running_loop()
    begin = loop.time()
    tasks = await asyncio.gather(
        *(
            manager.task(parents[i % PARENTS], f"concurrent job {i}", AGENT, f"job {i}")
            for i in range(TASKS)
        )
    )
    assert len({t.id for t in tasks}) == TASKS
    outs = await asyncio.gather(*(manager.output(t.id, block=True, timeout=90) for t in tasks))
    assert len({out.task.session_id for out in outs} - {None}) == TASKS  # one session each
    for i, out in enumerate(outs):
        assert not out.timed_out, f"job {i} still {out.task.status.value}"
        assert out.task.status is TaskStatus.COMPLETED, out.task.error
        assert out.task.result == f"Reply to: concurrent job {i}"

    async def all_delivered() -> bool:
        counts = await asyncio.gather(*(notices_in(backend, p) for p in parents))
        return sum(len(c) for c in counts) >= TASKS

    await until(all_delivered, timeout=60, what="50 notices")
    elapsed = loop.time() - begin
    await asyncio.sleep(1.5)  # a notice pass later: no duplicates appeared
    for p, parent in enumerate(parents):
        notices = await notices_in(backend, parent)
        mine = [t for i, t in enumerate(tasks) if i % PARENTS == p]
        assert len(notices) == len(mine)
        for task in mine:
            (notice,) = [n for n in notices if f"Background task `{task.id}` completed" in n]
            assert f"Result:\nReply to: {task.prompt}\n" in notice
    assert await manager.store.notices() == []
    assert elapsed < 120
