"""The admission queue on a real ``opencode serve`` (the scripted fake model of tests/e2e) and a
real PostgreSQL, both started here: ``max_running=3``, 20 forked tasks from two parents on two
worker processes, each turn a second long. A sampler reads OpenCode's busy sessions every 50 ms:
never more than 3 task sessions run at once. All 20 finish, each with its own parent's context
in its session before its prompt, in fair order (the two parents take turns)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from asyncagents.tasks import Task, TaskStatus
from pg_server import PostgresServer
from sampler import Sampler
from workers_support import (
    WorkerProcess,
    Workers,
    create_store,
    make_parents,
    open_store,
    store_args,
    tasks_by_id,
    wait_until,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import running_server
from fake_model import FakeModel

MAX_RUNNING = 3
TASKS = 20
OPTIONS = (
    "--lease-ttl", "10", "--poll-interval", "2", "--notice-interval", "0.5",
    "--wake", "never", "--stats-interval", "5", "--max-running", str(MAX_RUNNING),
)  # fmt: skip


@pytest.fixture(scope="module")
def opencode_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = FakeModel().start()
    try:
        with running_server(model, tmp_path_factory.mktemp("opencode")) as server:
            yield server.base_url
    finally:
        model.stop()


def _user_texts(url: str, session_id: str) -> list[str]:
    response = httpx.get(f"{url}/session/{session_id}/message", timeout=30)
    response.raise_for_status()
    return [
        str(p.get("text", ""))
        for m in response.json()
        if (m.get("info") or {}).get("role") == "user"
        for p in m.get("parts") or ()
        if p.get("type") == "text"
    ]


async def _tasks(dsn: str) -> dict[str, Task]:
    async with open_store("postgres", dsn) as store:
        return await tasks_by_id(store)


def test_max_running_3_twenty_forked_tasks_two_parents_two_workers(
    opencode_url: str, postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = create_store("postgres", postgres.create_database())
    parents = make_parents(opencode_url, 2)
    for n, parent in enumerate(parents):  # the context each fork copies
        httpx.post(
            f"{opencode_url}/session/{parent}/message",
            json={"parts": [{"type": "text", "text": f"parent {n} context"}], "noReply": True},
            timeout=30,
        ).raise_for_status()
    with Sampler(opencode_url) as sampler, Workers() as workers:
        procs = workers.add_all(
            [
                WorkerProcess(opencode_url, store_args("postgres", dsn), *OPTIONS,
                              log_dir=tmp_path / f"w{k}")
                for k in range(2)
            ]
        )  # fmt: skip
        # each worker asks for ten forks, alternating between the two parents
        for proc in procs:
            proc.launch(TASKS // 2, parents, "[fake:delay=1] fork {i}", fork=True)
        for proc in procs:
            line = proc.launched(timeout=120)
            assert line["errors"] == [] and line["count"] == TASKS // 2
        ids = [i for proc in procs for i in proc.of("launched")[0]["task_ids"]]
        tasks: dict[str, Task] = {}

        def all_ended() -> bool:
            tasks.update(asyncio.run(_tasks(dsn)))
            return all(not tasks[i].status.pending for i in ids)

        begin = time.monotonic()
        wait_until(all_ended, 240, "all 20 forked tasks ended", every=1.0)
        elapsed = time.monotonic() - begin
        mine = [tasks[i] for i in ids]
        users = {t.id: _user_texts(opencode_url, t.session_id or "") for t in mine}
    for task in mine:
        assert task.status is TaskStatus.COMPLETED, (task.id, task.error)
        assert task.is_forked and task.fork_stats is not None
        assert task.result == f"Reply to: {task.prompt}"
        # the parent's context, then the prompt: once each
        context, prompt = users[task.id]
        n = parents.index(task.parent_session_id)
        assert "<inherited_context>" in context and f"parent {n} context" in context
        assert prompt == task.prompt
    # never more than 3 at once, as OpenCode itself saw its busy sessions
    assert len(sampler.samples) > 50
    assert 1 <= sampler.most(mine) <= MAX_RUNNING
    # the whole run took at least the 1 s turns 3 at a time (7 rounds)
    assert elapsed >= TASKS // MAX_RUNNING
    # fair: once both parents' tasks wait, the parents take turns (a task whose fork is still
    # being prepared is skipped for the next one, so not strictly one each): the admissions
    # switch parents often, where first-in-first-out would run one parent's queue out first
    starts = defaultdict(list)
    for task in mine:
        assert task.admitted_at is not None
        starts[task.parent_session_id].append(task.admitted_at)
    assert [len(starts[p]) for p in parents] == [TASKS // 2] * 2
    both_waiting = max(task.created_at for task in mine)
    order = sorted(
        (task.admitted_at or 0, parents.index(task.parent_session_id))
        for task in mine
        if (task.admitted_at or 0) > both_waiting
    )
    counts = [sum(1 for _, p in order if p == n) for n in (0, 1)]
    switches = sum(1 for (_, p), (_, q) in pairwise(order) if p != q)
    assert switches >= min(counts) // 2, order
