"""kill -9 of a worker in the middle of a burst of launches: some of its tasks are stored with
their prompt sent, some with the prompt sent but not yet recorded as started, some not prompted
at all (how many of each depends on the moment; the test prints it). Another worker takes them
over after the lease, and no task is lost or stays running: the never-prompted ones are prompted
by the survivor, every task completes with its reply, each child holds its prompt exactly once,
and each task gets exactly one notice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
from asyncagents.tasks import TaskStatus
from fake_opencode import FakeOpenCodeProcess
from polling import until
from workers_support import (
    WorkerProcess,
    Workers,
    count_notices,
    make_parents,
    open_store,
    quick_options,
    store_args,
    tasks_by_id,
)

LEASE_TTL = 3.0
MARGIN = 15.0
BURST = 200
#: stored tasks of the victim when it is killed (its burst takes seconds)
KILL_AT = 20
OPTIONS = quick_options(LEASE_TTL)


def prompts_in(url: str, session_id: str, prompt: str) -> int:
    """How many user messages of the child session on the server hold the task's prompt."""
    response = httpx.get(f"{url}/session/{session_id}/message", timeout=30)
    response.raise_for_status()
    return sum(
        (m.get("info") or {}).get("role") == "user"
        and any(p.get("text") == prompt for p in m.get("parts") or ())
        for m in response.json()
    )


async def test_kill_during_a_launch_burst_loses_nothing(
    fake_server: FakeOpenCodeProcess, store_kind: str, store_where: str, tmp_path: Path
) -> None:
    url = fake_server.url
    parents = make_parents(url, 4)
    where = store_args(store_kind, store_where)
    with Workers() as workers:
        victim, survivor = workers.add_all(
            [
                WorkerProcess(url, where, *OPTIONS, log_dir=tmp_path / name)
                for name in ("victim", "survivor")
            ]
        )
        async with open_store(store_kind, store_where) as store:
            victim.launch(BURST, parents, "[sleep:1] burst {i}")

            async def some_stored() -> bool:
                return len(await store.list_tasks(owner=victim.instance_id)) >= KILL_AT

            await until(some_stored, 60, f"{KILL_AT} of the victim's tasks stored", every=0.01)
            victim.kill()
            assert victim.of("launched") == [], "the burst ended before the kill"
            at_kill = await tasks_by_id(store)  # the victim is dead: what it left

            async def all_ended() -> bool:
                tasks = await tasks_by_id(store)
                if any(t.status.active for t in tasks.values()):
                    return False
                if await store.notices(backend=url):
                    return False
                return sum(count_notices(url, parents).by_notice.values()) >= len(tasks)

            await until(all_ended, LEASE_TTL + MARGIN + 30, "every task ended, told", every=0.3)
            tasks = await tasks_by_id(store)

        assert KILL_AT <= len(tasks) < BURST
        outcomes: Counter[str] = Counter()
        for task in tasks.values():
            assert task.owner == survivor.instance_id  # every one was taken over
            assert task.session_id is not None
            assert task.status is TaskStatus.COMPLETED, (task.id, task.status, task.error)
            assert task.result == f"Reply to: {task.prompt}"
            assert prompts_in(url, task.session_id, task.prompt) == 1, task.id
            before = at_kill[task.id]
            if before.turn_started_at is not None:
                outcomes["completed"] += 1
            elif task.owner == survivor.instance_id and task.turn_started_at is not None:
                outcomes["started or prompted by the survivor"] += 1
        got = count_notices(url, parents)
        assert got.doubled == {}
        assert got.by_task == Counter(list(tasks))
        assert survivor.terminate() == 0, survivor.stderr_tail()
        assert survivor.of("stats")[-1]["taken_over"] == len(tasks)
        print(f"{store_kind}: {len(tasks)} stored at the kill: {dict(outcomes)}")
