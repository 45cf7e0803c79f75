"""The admission queue across worker processes (4 on one PostgreSQL database, 2 on one SQLite
file) against the fake OpenCode server in its own process.

A sampler reads the busy sessions of the server (``GET /session/status``) every 50 ms: the most
child sessions ever busy at once never pass a cap (all together, per parent, per agent). 300
tasks over 10 parents all complete once; the order they were admitted in is round robin over
the parents; a worker killed with ``kill -9`` while it holds queued tasks (forks among them,
some not prepared yet) loses none: the other worker runs each of them, once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
from asyncagents.tasks import Task, TaskStatus
from asyncagents.tasks.models import now_ms
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

WORKERS = {"sqlite": 2, "postgres": 4}
PARENTS = 10
TASKS = 300
MAX_RUNNING = 6
PER_PARENT = 2
PER_AGENT = {"plan": 2}
#: the workers' lease time: also how long a worker's new task is left to it
LEASE = 3.0


def cap_options(max_running: int = MAX_RUNNING) -> tuple[str, ...]:
    return (
        "--max-running", str(max_running),
        "--max-running-per-parent", str(PER_PARENT),
        "--max-running-per-agent", '{"plan": 2}',
        "--wake", "never",
        "--stall-timeout", "120",
    )  # fmt: skip


@contextmanager
def server() -> Iterator[FakeOpenCodeProcess]:
    with FakeOpenCodeProcess(heartbeat=2.0) as fake:
        yield fake


async def stored(kind: str, where: str) -> dict[str, Task]:
    async with open_store(kind, where) as store:
        return await tasks_by_id(store)


def wait_all_ended(kind: str, where: str, ids: Sequence[str], timeout: float) -> dict[str, Task]:
    ended: dict[str, Task] = {}

    def done() -> bool:
        ended.clear()
        ended.update(asyncio.run(stored(kind, where)))
        return all(not ended[i].status.pending for i in ids if i in ended)

    wait_until(done, timeout, "every task ended", every=0.5)
    return ended


def child_prompts(url: str, session_id: str) -> list[str]:
    """The user messages of a child session (its prompts and injected context)."""
    response = httpx.get(f"{url}/session/{session_id}/message", timeout=30)
    response.raise_for_status()
    return [
        str(p.get("text", ""))
        for m in response.json()
        if (m.get("info") or {}).get("role") == "user"
        for p in m.get("parts") or ()
        if p.get("type") == "text"
    ]


def test_caps_hold_across_workers_and_300_tasks_complete_in_round_robin(
    store_kind: str, store_where: str, tmp_path: Path
) -> None:
    with server() as fake, Workers() as workers, Sampler(fake.url) as sampler:
        parents = make_parents(fake.url, PARENTS)
        blockers = make_parents(fake.url, MAX_RUNNING // PER_PARENT)
        procs = workers.add_all(
            [
                WorkerProcess(
                    fake.url,
                    store_args(store_kind, store_where),
                    *quick_options(LEASE),
                    *cap_options(),
                    log_dir=tmp_path / f"w{k}",
                )
                for k in range(WORKERS[store_kind])
            ]
        )
        # every slot held, so all 300 wait together: the order they start in is the queue's
        before = procs[0].launch(MAX_RUNNING, blockers, "[hold] blocker {i}")
        procs[0].launched(before)
        # parent by parent, each parent's tasks in one block: plain FIFO would run parent 0's
        # whole queue first. Every fifth task runs as agent "plan" (capped at 2)
        for k, proc in enumerate(procs):
            mine = parents[k * PARENTS // len(procs) : (k + 1) * PARENTS // len(procs)]
            order = [p for p in mine for _ in range(TASKS // PARENTS)]
            proc.launch(
                len(order), order, "[sleep:0.1] job {i}", ["build", "build", "build", "build",
                                                            "plan"]
            )  # fmt: skip
        for proc in procs:
            proc.launched(1 if proc is procs[0] else 0, timeout=180)
        ids = all_ids(procs)
        assert len(ids) == TASKS + MAX_RUNNING
        queued = asyncio.run(stored(store_kind, store_where))
        assert Counter(t.status for t in queued.values()) == {
            TaskStatus.RUNNING: MAX_RUNNING,
            TaskStatus.QUEUED: TASKS,
        }
        # a new task is left to the worker that queued it for the lease time: let every one be
        # past that, so any worker may admit any task from the first freed slot on
        newest = max(t.created_at for t in queued.values())
        time.sleep(max(0.0, (newest - now_ms()) / 1000 + LEASE + 0.2))
        fake.release()
        tasks = wait_all_ended(store_kind, store_where, ids, timeout=240)
    work = [tasks[i] for i in ids if tasks[i].parent_session_id not in blockers]
    assert len(work) == TASKS
    assert Counter(t.status for t in tasks.values()) == {TaskStatus.COMPLETED: TASKS + MAX_RUNNING}
    # every turn ended once: one end line per task over all the workers
    ends = Counter(
        e["task_id"] for p in procs for e in p.of("task") if e["kind"] == "task.completed"
    )
    assert set(ends.values()) == {1} and len(ends) == TASKS + MAX_RUNNING
    # the caps, as the server saw its busy sessions
    assert len(sampler.samples) > 100
    every = list(tasks.values())
    assert 1 <= sampler.most(every) <= MAX_RUNNING
    assert sampler.most(every, "parent_session_id") <= PER_PARENT
    plan = [t for t in every if t.agent == "plan"]
    assert len(plan) == TASKS // 5 and sampler.most(plan) <= PER_AGENT["plan"]
    # round robin: no parent's k-th task is admitted after another parent's (k + 2)-th
    # (plain FIFO would run parent 0's 30 tasks before parent 1's first); times in ms, so
    # admissions of one pass tie
    times = defaultdict(list)
    for t in work:
        times[t.parent_session_id].append(t.admitted_at or 0)
    for ts in times.values():
        ts.sort()
    assert len(times) == PARENTS
    for p, mine in times.items():
        for q, theirs in times.items():
            for k in range(len(mine) - 2):
                assert mine[k] <= theirs[k + 2], (
                    f"{q}'s task {k + 3} was admitted before {p}'s task {k + 1}",
                    {x: [v - min(ts) for v in ts[:8]] for x, ts in times.items()},
                )


def test_kill_9_of_a_worker_holding_queued_tasks_loses_none_and_runs_none_twice(
    store_kind: str, store_where: str, tmp_path: Path
) -> None:
    queued_tasks = 24
    with server() as fake, Workers() as workers, Sampler(fake.url) as sampler:
        parents = make_parents(fake.url, 3)
        for parent in parents:  # something for the forks to copy
            httpx.post(
                f"{fake.url}/session/{parent}/message",
                json={"parts": [{"type": "text", "text": "context"}], "noReply": True},
                timeout=30,
            ).raise_for_status()
        options = (*quick_options(3.0), *cap_options(max_running=3))
        victim = workers.add(
            WorkerProcess(
                fake.url, store_args(store_kind, store_where), *options, log_dir=tmp_path / "v"
            )
        )
        survivor = workers.add(
            WorkerProcess(
                fake.url, store_args(store_kind, store_where), *options, log_dir=tmp_path / "s"
            )
        )
        # the survivor holds every slot, so the victim's tasks all wait in the queue
        held = survivor.launch(3, parents, "[hold] held {i}")
        survivor.launched(held)
        victim.launch(queued_tasks // 2, parents, "[sleep:0.1] plain {i}")
        victim.launch(queued_tasks // 2, parents, "[sleep:0.1] forked {i}", fork=True)
        victim.launched(0)
        victim.launched(1)
        ids = all_ids([victim])
        assert len(ids) == queued_tasks
        before = asyncio.run(stored(store_kind, store_where))
        assert {before[i].status for i in ids} == {TaskStatus.QUEUED}
        assert {before[i].owner for i in ids} == {victim.instance_id}
        victim.kill()
        fake.release()
        tasks = wait_all_ended(store_kind, store_where, ids, timeout=120)
        prompts = {
            i: child_prompts(fake.url, tasks[i].session_id or "") for i in ids
        }  # fmt: skip
    for task_id in ids:
        task = tasks[task_id]
        assert task.status is TaskStatus.COMPLETED, (task_id, task.error)
        assert task.owner == survivor.instance_id
        assert prompts[task_id].count(task.prompt) == 1, prompts[task_id]  # sent once
        if task.is_forked:
            assert len(prompts[task_id]) == 2
            assert "<inherited_context>" in prompts[task_id][0]
        else:
            assert prompts[task_id] == [task.prompt]
    assert sampler.most(list(tasks.values())) <= 3
