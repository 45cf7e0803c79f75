"""Multi-process benchmarks: worker processes (tests/workers/worker.py, one `TaskManager` each)
sharing one store, against the fake OpenCode server (tests/fake_opencode.py) in its own process:

- completions per second with 1 and 4 workers, on one SQLite file and on one PostgreSQL
  database: N tasks launched together (split over the workers, over parents every worker
  shares), timed until every one was recorded completed, and until every notice was delivered;
- takeover latency after a kill -9: a worker following K running tasks is killed, and the time
  until another worker owns all of them, and until all were recorded completed (they end on the
  server just after the kill), against the lease time;
- memory per 1,000 active tasks: the RSS growth of one worker process following N running
  (held) tasks, after a warm-up batch.

Each measured value is in ``benchmark.extra_info``; the benchmark's own time is one round (a
batch, a takeover, a fill). ``ASYNCAGENTS_BENCH_SMOKE=1`` runs small sizes (well under 30 s).
The lead runs the full sizes on a quiet machine; on a loaded one the numbers mean little.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "workers"))
from fake_opencode import FakeOpenCodeProcess
from pg_server import PostgresServer, running_postgres
from workers_support import (
    WorkerProcess,
    Workers,
    count_notices,
    create_store,
    make_parents,
    open_store,
    store_args,
    tasks_by_id,
    wait_until,
)

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
#: tasks per round of the completions benchmark
BATCH = 20 if SMOKE else 1_000
ROUNDS = 1 if SMOKE else 3
PARENTS = 5 if SMOKE else 20
#: tasks of the killed worker
TAKEOVER_TASKS = 10 if SMOKE else 500
TAKEOVER_LEASE = 2.0 if SMOKE else 10.0
#: running tasks followed by the measured worker
MEMORY_TASKS = 50 if SMOKE else 1_000
WARM_UP = 5 if SMOKE else 50
TIMEOUT = 120.0 if SMOKE else 900.0
OPTIONS = (
    "--poll-interval", "5", "--notice-interval", "0.5", "--notice-claim-ttl", "60",
    "--notice-retry-initial", "0.2", "--stats-interval", "30",
)  # fmt: skip
STORES = ["sqlite", "postgres"]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenCodeProcess]:
    """One fake server for the completions benchmarks (they hold no turn, so they can share)."""
    with FakeOpenCodeProcess() as server:
        yield server


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


def _where(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return create_store("sqlite", str(tmp_path / "tasks.sqlite3"))
    server: PostgresServer = request.getfixturevalue("postgres")
    return create_store("postgres", server.create_database())


def _completed(workers: Workers) -> int:
    return sum(w.completed() for w in workers.all)


def _notices(url: str, parents: list[str]) -> int:
    return sum(count_notices(url, parents).by_notice.values())


@pytest.mark.parametrize("n_workers", [1, 4])
@pytest.mark.parametrize("store_kind", STORES)
def test_completions_per_second(
    benchmark: Any,
    request: pytest.FixtureRequest,
    shared_server: FakeOpenCodeProcess,
    tmp_path: Path,
    store_kind: str,
    n_workers: int,
) -> None:
    benchmark.group = f"workers-completions-{store_kind}"
    where = _where(store_kind, tmp_path, request)
    rounds: list[dict[str, float]] = []
    server = shared_server
    with Workers() as workers:
        parents = make_parents(server.url, PARENTS)
        workers.add_all(
            [
                WorkerProcess(
                    server.url,
                    store_args(store_kind, where),
                    "--lease-ttl",
                    "30",
                    *OPTIONS,
                    log_dir=tmp_path / f"w{n}",
                )
                for n in range(n_workers)
            ]
        )

        def batch() -> None:
            done_before = _completed(workers)
            told_before = BATCH * len(rounds)
            begin = time.perf_counter()
            for k, worker in enumerate(workers.all):
                share = BATCH // n_workers + (1 if k < BATCH % n_workers else 0)
                worker.launch(share, parents, "[tool] job {i} of {worker}")
            wait_until(
                lambda: _completed(workers) >= done_before + BATCH, TIMEOUT, "completions", 0.005
            )
            completed = time.perf_counter() - begin
            wait_until(
                lambda: _notices(server.url, parents) >= told_before + BATCH,
                TIMEOUT,
                "notices",
                0.1,
            )
            told = time.perf_counter() - begin
            rounds.append({"completed_s": completed, "told_s": told})

        benchmark.pedantic(batch, rounds=ROUNDS, iterations=1)
        for worker in workers.all:
            launched = worker.of("launched")
            assert all(line["errors"] == [] for line in launched)
        assert _notices(server.url, parents) == BATCH * ROUNDS
        assert count_notices(server.url, parents).doubled == {}

    best = min(r["completed_s"] for r in rounds)
    benchmark.extra_info.update(
        {
            "store": store_kind,
            "workers": n_workers,
            "tasks_per_round": BATCH,
            "rounds": ROUNDS,
            "completions_per_s_best": round(BATCH / best, 1),
            "completions_per_s_mean": round(
                BATCH * len(rounds) / sum(r["completed_s"] for r in rounds), 1
            ),
            "notices_per_s_mean": round(BATCH * len(rounds) / sum(r["told_s"] for r in rounds), 1),
        }
    )


@pytest.mark.parametrize("store_kind", STORES)
def test_takeover_latency_after_kill(
    benchmark: Any, request: pytest.FixtureRequest, tmp_path: Path, store_kind: str
) -> None:
    benchmark.group = "workers-takeover"
    where = _where(store_kind, tmp_path, request)
    lease = ["--lease-ttl", str(TAKEOVER_LEASE)]
    result: dict[str, float] = {}
    with FakeOpenCodeProcess() as server, Workers() as workers:
        parents = make_parents(server.url, PARENTS)
        args = store_args(store_kind, where)
        victim, survivor = workers.add_all(
            [
                WorkerProcess(server.url, args, *lease, *OPTIONS, log_dir=tmp_path / name)
                for name in ("victim", "survivor")
            ]
        )
        victim.launch(TAKEOVER_TASKS, parents, "[hold] held {i}")
        held = victim.launched(timeout=TIMEOUT)["task_ids"]
        assert len(held) == TAKEOVER_TASKS

        async def measure() -> None:
            async with open_store(store_kind, where) as store:
                while True:
                    tasks = await tasks_by_id(store)
                    if all(tasks[t].turn_started_at is not None for t in held):
                        break
                    await asyncio.sleep(0.05)
                killed = time.perf_counter()
                victim.kill()
                server.release()  # the turns end on the server while their owner is dead
                owned = None
                while True:
                    tasks = await tasks_by_id(store)
                    if owned is None and all(tasks[t].owner == survivor.instance_id for t in held):
                        owned = time.perf_counter() - killed
                    if all(tasks[t].status.value == "completed" for t in held):
                        break
                    if time.perf_counter() - killed > TIMEOUT:
                        raise AssertionError("takeover not done in time")
                    await asyncio.sleep(0.02)
                result["finished_s"] = time.perf_counter() - killed
                result["owned_s"] = owned if owned is not None else result["finished_s"]

        benchmark.pedantic(lambda: asyncio.run(measure()), rounds=1, iterations=1)
        assert survivor.stats()["taken_over"] == TAKEOVER_TASKS

    benchmark.extra_info.update(
        {
            "store": store_kind,
            "tasks": TAKEOVER_TASKS,
            "lease_ttl_s": TAKEOVER_LEASE,
            "kill_to_all_owned_s": round(result["owned_s"], 3),
            "kill_to_all_completed_s": round(result["finished_s"], 3),
            "beyond_lease_s": round(result["finished_s"] - TAKEOVER_LEASE, 3),
        }
    )


def test_memory_per_1000_active_tasks(benchmark: Any, tmp_path: Path) -> None:
    benchmark.group = "workers-memory"
    measured: dict[str, int] = {}
    with FakeOpenCodeProcess() as server, Workers() as workers:
        parents = make_parents(server.url, PARENTS)
        worker = workers.add(
            WorkerProcess(
                server.url,
                store_args("sqlite", create_store("sqlite", str(tmp_path / "tasks.sqlite3"))),
                "--lease-ttl",
                "30",
                *OPTIONS,
                log_dir=tmp_path / "w",
            )
        )
        # warm-up: imports, pools, caches and the first notices are not per-task memory
        worker.launch(WARM_UP, parents, "[tool] warm {i}")
        worker.launched(0, timeout=TIMEOUT)
        wait_until(lambda: worker.completed() >= WARM_UP, TIMEOUT, "warm-up", 0.05)
        wait_until(
            lambda: _notices(server.url, parents) >= WARM_UP, TIMEOUT, "warm-up notices", 0.05
        )
        measured["before_kb"] = worker.stats()["rss_kb"]

        def fill() -> None:
            worker.launch(MEMORY_TASKS, parents, "[hold] active {i}")
            line = worker.launched(1, timeout=TIMEOUT)
            assert line["errors"] == [] and line["count"] == MEMORY_TASKS
            wait_until(
                lambda: worker.stats()["following"] >= MEMORY_TASKS, TIMEOUT, "following", 0.2
            )
            time.sleep(1.0)  # the first checks after each prompt have run
            stats = worker.stats()
            measured["after_kb"] = stats["rss_kb"]
            measured["following"] = stats["following"]

        benchmark.pedantic(fill, rounds=1, iterations=1)
        server.release()
        wait_until(lambda: worker.completed() >= WARM_UP + MEMORY_TASKS, TIMEOUT, "release", 0.1)

    growth = measured["after_kb"] - measured["before_kb"]
    benchmark.extra_info.update(
        {
            "active_tasks": measured["following"],
            "rss_before_kb": measured["before_kb"],
            "rss_after_kb": measured["after_kb"],
            "rss_per_1000_tasks_kb": round(growth * 1000 / MEMORY_TASKS),
        }
    )
