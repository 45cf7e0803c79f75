"""Four worker processes on one store (SQLite, then PostgreSQL) against a real ``opencode serve``
(the scripted fake model of tests/e2e): 40 tasks over parents shared by every worker, none
lost, each ended once by its owner, every notice exactly once to its parent (counted in the
parent's user messages on the server). Fewer tasks than against the fake server: each one is a
real OpenCode session and model turn, and so is each delivery. Then kill -9 of a worker whose
turns still run in OpenCode: the other one takes them over and finishes them."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncagents.tasks import TaskStatus
from polling import until
from workers_support import (
    WorkerProcess,
    Workers,
    count_notices,
    make_parents,
    open_store,
    store_args,
    tasks_by_id,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import running_server
from fake_model import FakeModel

WORKERS = 4
TASKS = 40
PARENTS = 4
OPTIONS = (
    "--lease-ttl", "10", "--poll-interval", "3", "--notice-interval", "0.5",
    "--notice-claim-ttl", "60", "--notice-retry-initial", "0.5", "--stats-interval", "5",
)  # fmt: skip
RUN_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def opencode_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = FakeModel().start()
    try:
        with running_server(model, tmp_path_factory.mktemp("opencode")) as server:
            yield server.base_url
    finally:
        model.stop()


async def test_four_workers_on_opencode_none_lost_notices_once(
    opencode_url: str, store_kind: str, store_where: str, tmp_path: Path
) -> None:
    parents = make_parents(opencode_url, PARENTS)
    with Workers() as workers:
        workers.add_all(
            [
                WorkerProcess(
                    opencode_url,
                    store_args(store_kind, store_where),
                    *OPTIONS,
                    log_dir=tmp_path / f"w{n}",
                )
                for n in range(WORKERS)
            ]
        )
        for worker in workers.all:
            worker.launch(TASKS // WORKERS, parents, "job {i} of {worker}")
        launched_by: dict[str, str] = {}
        for worker in workers.all:
            line = worker.launched(timeout=RUN_TIMEOUT)
            assert line["errors"] == [] and line["count"] == TASKS // WORKERS
            launched_by.update(dict.fromkeys(line["task_ids"], worker.instance_id))
        assert len(launched_by) == TASKS

        async with open_store(store_kind, store_where) as store:

            async def all_done() -> bool:
                tasks = await tasks_by_id(store)
                if any(t.status.active for t in tasks.values()):
                    return False
                if await store.notices(backend=opencode_url):
                    return False
                return sum(count_notices(opencode_url, parents).by_notice.values()) >= TASKS

            await until(all_done, RUN_TIMEOUT, "every task ended and its notice sent", every=1.0)
            tasks = await tasks_by_id(store)

        assert sorted(tasks) == sorted(launched_by)
        for task in tasks.values():
            assert task.status is TaskStatus.COMPLETED, (task.id, task.status, task.error)
            assert task.result == f"Reply to: {task.prompt}"
            assert task.backend == opencode_url
            assert task.owner == launched_by[task.id]
        ended = Counter(
            e["task_id"] for w in workers.all for e in w.of("task") if e["kind"] == "task.completed"
        )
        assert ended == Counter(list(launched_by))

        got = count_notices(opencode_url, parents)
        assert got.doubled == {}
        assert got.by_task == Counter(list(launched_by))
        assert all(got.parent_of_task[t] == tasks[t].parent_session_id for t in tasks)

        for worker in workers.all:
            assert worker.terminate() == 0, worker.stderr_tail()
            assert worker.of("fatal") == []
            assert worker.of("stats")[-1]["taken_over"] == 0


KILL_LEASE = 4.0
KILL_MARGIN = 20.0
SLOW = 8


async def test_kill_on_opencode_tasks_taken_over_and_finished(
    opencode_url: str, store_kind: str, store_where: str, tmp_path: Path
) -> None:
    """kill -9 of a worker while its turns run in OpenCode (the fake model answers after 6 s):
    the other worker takes them over after the lease and records each reply; one notice each.
    Notices are added without a reply (``--wake never``): a woken parent would echo the delay tag
    of the result it is told and sleep 6 s itself per delivery."""
    parents = make_parents(opencode_url, 2)
    options = (
        "--lease-ttl", str(KILL_LEASE), "--poll-interval", "1", "--notice-interval", "0.3",
        "--notice-claim-ttl", "10", "--wake", "never", "--stats-interval", "1",
    )  # fmt: skip
    where = store_args(store_kind, store_where)
    with Workers() as workers:
        victim, survivor = workers.add_all(
            [
                WorkerProcess(opencode_url, where, *options, log_dir=tmp_path / name)
                for name in ("victim", "survivor")
            ]
        )
        victim.launch(SLOW, parents, "[fake:delay=6] slow {i}")
        held = victim.launched(timeout=120)["task_ids"]
        assert len(held) == SLOW
        async with open_store(store_kind, store_where) as store:

            async def started() -> bool:
                tasks = await tasks_by_id(store)
                return all(tasks[t].turn_started_at is not None for t in held)

            await until(started, 60, "the slow turns started", every=0.1)
            killed_at = time.monotonic()
            victim.kill()
            survivors = {survivor.instance_id}

            async def completed() -> bool:
                tasks = await tasks_by_id(store)
                return all(
                    tasks[t].owner in survivors and tasks[t].status is TaskStatus.COMPLETED
                    for t in held
                )

            await until(completed, KILL_LEASE + KILL_MARGIN, "taken over and completed", every=0.2)
            assert time.monotonic() - killed_at <= KILL_LEASE + KILL_MARGIN + 1.0

            async def told() -> bool:
                if await store.notices(backend=opencode_url):
                    return False
                return sum(count_notices(opencode_url, parents).by_notice.values()) >= SLOW

            await until(told, 60, "every notice sent", every=0.3)
            tasks = await tasks_by_id(store)

        for t in held:
            assert tasks[t].result == f"Reply to: {tasks[t].prompt}"
        got = count_notices(opencode_url, parents)
        assert got.doubled == {}
        assert got.by_task == Counter(held)
        assert survivor.terminate() == 0, survivor.stderr_tail()
        assert survivor.of("stats")[-1]["taken_over"] == SLOW
