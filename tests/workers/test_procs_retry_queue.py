"""Tries again after a provider error wait in the admission queue across worker processes (2 on
one SQLite file, or on one PostgreSQL database) against the fake OpenCode server in its own
process: every task's first two tries fail with HTTP 429, so each turn ends into a try again
that gives up its slot and waits out its backoff in the queue, to be admitted by either worker.

A sampler reads the server's busy sessions every 50 ms: never more than ``max_running`` task
sessions run at once, whatever worker sends a try. Every task completes after 3 tries, each
sent once (3 user messages in its session), and ends once. A worker killed with ``kill -9``
while tries of its tasks wait in the queue loses none: the other worker sends them, once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import httpx
from asyncagents.tasks import Task, TaskStatus
from fake_opencode import FakeOpenCodeProcess
from sampler import Sampler
from workers_support import (
    WorkerProcess,
    Workers,
    all_ids,
    make_parents,
    open_store,
    quick_options,
    store_args,
    tasks_by_id,
    wait_until,
)

MAX_RUNNING = 2
TASKS = 12
PROMPT = "[429:2] [sleep:0.2] job {i}"


def options(max_running: int = MAX_RUNNING) -> tuple[str, ...]:
    return (
        *quick_options(3.0),
        "--max-running", str(max_running),
        "--wake", "never",
        "--stall-timeout", "120",
        "--attempts", "3",
        "--retry-initial", "0.4",
        "--retry-max", "0.4",
        # what admits most tries is the owner's timer at the backoff's end; the other worker
        # looks every half second
        "--admission-interval", "0.5",
    )  # fmt: skip


async def stored(kind: str, where: str) -> dict[str, Task]:
    async with open_store(kind, where) as store:
        return await tasks_by_id(store)


def wait_all_ended(kind: str, where: str, ids: Sequence[str], timeout: float) -> dict[str, Task]:
    ended: dict[str, Task] = {}

    def done() -> bool:
        ended.clear()
        ended.update(asyncio.run(stored(kind, where)))
        return all(i in ended and not ended[i].status.pending for i in ids)

    wait_until(done, timeout, "every task ended", every=0.5)
    return ended


def user_prompts(url: str, session_id: str) -> list[str]:
    response = httpx.get(f"{url}/session/{session_id}/message", timeout=30)
    response.raise_for_status()
    return [
        "".join(str(p.get("text", "")) for p in m.get("parts") or () if p.get("type") == "text")
        for m in response.json()
        if (m.get("info") or {}).get("role") == "user"
    ]


def check_tries(url: str, tasks: dict[str, Task], ids: Sequence[str]) -> None:
    for task_id in ids:
        task = tasks[task_id]
        assert task.status is TaskStatus.COMPLETED, (task_id, task.status, task.error)
        assert task.tries == [None, None, None], (task_id, task.tries)
        assert task.result == f"Reply to: {task.prompt}"
        # each try sent once: a new user message after the failed one, never a repeat
        assert user_prompts(url, task.session_id or "") == [task.prompt] * 3


def test_tries_again_keep_the_cap_across_workers_and_each_is_sent_once(
    store_kind: str, store_where: str, tmp_path: Path
) -> None:
    with FakeOpenCodeProcess(heartbeat=2.0) as fake, Workers() as workers:
        parents = make_parents(fake.url, 3)
        procs = workers.add_all(
            [
                WorkerProcess(
                    fake.url, store_args(store_kind, store_where), *options(), log_dir=tmp_path / k
                )
                for k in ("w0", "w1")
            ]
        )
        with Sampler(fake.url) as sampler:
            for proc in procs:
                proc.launch(TASKS // 2, parents, PROMPT)
            for proc in procs:
                proc.launched()
            ids = all_ids(procs)
            assert len(ids) == TASKS
            tasks = wait_all_ended(store_kind, store_where, ids, timeout=180)
        check_tries(fake.url, tasks, ids)
        ends = Counter(
            e["task_id"] for p in procs for e in p.of("task") if e["kind"] == "task.completed"
        )
        assert set(ends.values()) == {1} and len(ends) == TASKS
    assert len(sampler.samples) > 50
    every = list(tasks.values())
    # 36 tries of 0.2 s, two at a time: the cap was reached, and never passed
    assert sampler.most(every) == MAX_RUNNING


def test_kill_9_while_tries_wait_in_the_queue_loses_none_and_sends_none_twice(
    store_kind: str, store_where: str, tmp_path: Path
) -> None:
    with FakeOpenCodeProcess(heartbeat=2.0) as fake, Workers() as workers:
        parents = make_parents(fake.url, 2)
        store = store_args(store_kind, store_where)
        victim = workers.add(WorkerProcess(fake.url, store, *options(), log_dir=tmp_path / "v"))
        survivor = workers.add(WorkerProcess(fake.url, store, *options(), log_dir=tmp_path / "s"))
        with Sampler(fake.url) as sampler:
            victim.launched(victim.launch(6, parents, PROMPT))
            ids = all_ids([victim])

            def tries_waiting() -> bool:
                tasks = asyncio.run(stored(store_kind, store_where))
                return any(tasks[i].status is TaskStatus.QUEUED and tasks[i].tries for i in ids)

            wait_until(tries_waiting, 60, "a try again waiting in the queue", every=0.05)
            victim.kill()
            tasks = wait_all_ended(store_kind, store_where, ids, timeout=180)
        check_tries(fake.url, tasks, ids)
        assert survivor.completed() >= 1
    assert sampler.most(list(tasks.values())) <= MAX_RUNNING
