"""Four worker processes on one store against a real ``opencode serve`` (the scripted fake model
of tests/e2e answers): 40 tasks, none lost, every notice exactly once, each parent woken by
prompts its agent answers."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncagents.tasks import OpenCodeBackend, TaskStatus, TaskStore
from polling import until
from workers import Worker, all_ended, notice_counts, open_store, tasks_by_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import AGENT, OpenCodeServer, running_server
from fake_model import FakeModel

WORKERS = 4
PER_WORKER = 10
PARENTS = 4


@pytest.fixture(scope="module")
def opencode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenCodeServer]:
    model = FakeModel().start()
    try:
        with running_server(model, tmp_path_factory.mktemp("opencode")) as server:
            yield server
    finally:
        model.stop()


async def test_four_workers_on_opencode_lose_nothing_and_notify_once(
    opencode: OpenCodeServer, store_spec: str, workers: list[Worker]
) -> None:
    async with OpenCodeBackend(opencode.base_url) as backend:
        parents = [
            str((await backend.create_session(title=f"parent {i}"))["id"]) for i in range(PARENTS)
        ]
        for w in range(WORKERS):
            workers.append(
                Worker(
                    opencode.base_url,
                    store_spec,
                    f"worker-{w}",
                    parents=",".join(parents),
                    count=PER_WORKER,
                    prompt=f"w{w} job {{i}}",
                    agent=AGENT,
                    poll=2.0,
                )
            )
        launched = [i for w in workers for i in w.wait_launched(timeout=180)]
        assert len(set(launched)) == WORKERS * PER_WORKER
        store = open_store(store_spec)
        try:
            await until(lambda: all_ended(store, launched), timeout=300, what="all ended", every=1)
            tasks = await tasks_by_id(store)
            for task_id in launched:
                task = tasks[task_id]
                assert task.status is TaskStatus.COMPLETED, task.error
                assert task.result == f"Reply to: {task.prompt}"
            await until(lambda: _no_notices(store), timeout=180, what="notices out", every=1)
            # every woken parent is idle again (its agent answered), and nothing came twice
            await until(lambda: _idle(backend, parents), timeout=120, what="parents idle", every=1)
            await asyncio.sleep(2.0)
            counts = await notice_counts(backend, parents)
            assert sorted(counts) == sorted(launched)
            assert set(counts.values()) == {1}
        finally:
            await store.close()
    assert [w.stop() for w in workers] == [0] * WORKERS


async def _no_notices(store: TaskStore) -> bool:
    return not await store.notices()


async def _idle(backend: OpenCodeBackend, parents: list[str]) -> bool:
    busy = await backend.status()
    return not any(p in busy for p in parents)
