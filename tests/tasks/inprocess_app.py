"""An application embedding the task manager over an `InProcessBackend`, on the default store
path (``$XDG_STATE_HOME``), as a separate process: ``python inprocess_app.py NAME SYNC_DIR N``.

It starts its manager, waits until every app named in ``SYNC_DIR`` is up (files ``up-*``),
launches N tasks from one parent and waits for them, waits for the other apps to have done the
same (files ``done-*``) and a few notice passes more, then reads its tasks back and prints one
JSON line: ``{"tasks": N, "completed": ..., "not_found": ..., "results_ok": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    TaskManager,
    TaskNotFoundError,
)

#: how many apps the test runs at once
APPS = 2


async def reply(turn: InProcessTurn) -> str:
    """A child answers at once; a parent woken by a notice takes a while, as a model does (its
    next notices wait until it is idle again)."""
    await asyncio.sleep(1.5 if "[asyncagents notice" in turn.prompt else 0.01)
    return "Reply to: " + turn.prompt


async def wait_for_files(sync: Path, prefix: str, deadline: float) -> None:
    while len(list(sync.glob(f"{prefix}-*"))) < APPS:
        if time.monotonic() > deadline:
            raise SystemExit(f"the other apps never wrote {prefix}-*")
        await asyncio.sleep(0.05)


async def main(name: str, sync: Path, count: int) -> None:
    deadline = time.monotonic() + 120
    backend = InProcessBackend(reply)
    # all defaults: the default store path, and parents woken by their notices
    async with TaskManager(backend) as manager:
        (sync / f"up-{name}").touch()
        await wait_for_files(sync, "up", deadline)
        parent = str((await backend.create_session(title=f"parent of {name}"))["id"])
        ids = [
            (await manager.task(parent, f"job {i} of {name}", agent="build")).id
            for i in range(count)
        ]
        for task_id in ids:
            await manager.output(task_id, block=True, timeout=60, parent_session_id=parent)
        (sync / f"done-{name}").touch()
        await wait_for_files(sync, "done", deadline)
        await asyncio.sleep(3.0)  # three notice passes of every app
        completed = not_found = results_ok = 0
        for i, task_id in enumerate(ids):
            try:
                out = await manager.output(task_id, parent_session_id=parent)
            except TaskNotFoundError:
                not_found += 1
                continue
            completed += out.task.status.value == "completed"
            results_ok += out.task.result == f"Reply to: job {i} of {name}"
        (sync / f"read-{name}").touch()
        await wait_for_files(sync, "read", deadline)
    line = {"tasks": count, "completed": completed, "not_found": not_found}
    print(json.dumps({**line, "results_ok": results_ok}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
