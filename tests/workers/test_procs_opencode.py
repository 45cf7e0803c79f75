"""Four worker processes on one store (SQLite, then PostgreSQL) against a real ``opencode serve``
(the scripted fake model of tests/e2e): 40 tasks over parents shared by every worker, none
lost, each ended once by its owner, every notice exactly once to its parent (counted in the
parent's user messages on the server). Fewer tasks than against the fake server: each one is a
real OpenCode session and model turn, and so is each delivery."""

from __future__ import annotations

import sys
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
