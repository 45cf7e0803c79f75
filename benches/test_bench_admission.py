"""Admission benchmark: worker processes (tests/workers/worker.py) sharing one store and a cap,
at saturation, against the fake OpenCode server (tests/fake_opencode.py) in its own process.

4 workers, ``--max-running`` M, N short tasks (``[sleep:S]``) launched at once over P parents:
the queue stays long, so every end of a task frees a slot that the next admission fills. From
the store afterwards (times in ms, one machine's clock):

- admission latency: the i-th end of a turn (`completed_at`, when the store freed the slot)
  against the (M + i)-th prompt accepted by the server (`turn_started_at`), both in time order,
  counting only admissions whose task was waiting then; p50, p99 and max. Split into the wait
  for the admission (`admitted_at`) and the prompt's send;
- tasks admitted per second over the saturated stretch (first end to last start);
- the most tasks ever running at once by the store's own times (never above M).

Each value is in ``benchmark.extra_info``; the benchmark's own time is one round.
``ASYNCAGENTS_BENCH_SMOKE=1`` runs small sizes. Numbers from a loaded machine mean little.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
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
    create_store,
    make_parents,
    open_store,
    store_args,
    tasks_by_id,
    wait_until,
)

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
WORKERS = 4
MAX_RUNNING = 4 if SMOKE else 8
TASKS = 40 if SMOKE else 400
PARENTS = 4 if SMOKE else 10
SLEEP = 0.1
TIMEOUT = 120.0 if SMOKE else 600.0
OPTIONS = (
    "--poll-interval", "5", "--notice-interval", "0.5", "--stats-interval", "30",
    "--wake", "never", "--max-running", str(MAX_RUNNING),
)  # fmt: skip
STORES = ["sqlite", "postgres"]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(tasks: list[Any], cap: int) -> dict[str, float]:
    """Admission latency and rate from the stored times of a saturated run (see module)."""
    ends = sorted(t.completed_at for t in tasks)
    started = sorted(tasks, key=lambda t: t.turn_started_at)
    latency, admit_wait, send = [], [], []
    for i, end in enumerate(ends[: len(started) - cap]):
        task = started[cap + i]
        if task.created_at > end:
            continue  # it was not waiting: not an admission delay
        latency.append(task.turn_started_at - end)
        admit_wait.append(task.admitted_at - end)
        send.append(task.turn_started_at - task.admitted_at)
    span = (started[-1].turn_started_at - ends[0]) / 1000
    events = sorted(
        [(t.admitted_at, 1) for t in tasks] + [(t.completed_at, -1) for t in tasks]
    )  # an end and an admission at one ms: the end first (-1 sorts first)
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return {
        "admissions_measured": len(latency),
        "latency_p50_ms": percentile(latency, 0.5),
        "latency_p99_ms": percentile(latency, 0.99),
        "latency_max_ms": max(latency),
        "admit_wait_p50_ms": percentile(admit_wait, 0.5),
        "admit_wait_p99_ms": percentile(admit_wait, 0.99),
        "prompt_send_p50_ms": percentile(send, 0.5),
        "prompt_send_p99_ms": percentile(send, 0.99),
        "admitted_per_second": round((len(started) - cap) / span, 1) if span > 0 else 0.0,
        "most_running": most,
        "mean_turn_ms": statistics.mean(t.completed_at - t.turn_started_at for t in tasks),
    }


@pytest.mark.parametrize("kind", STORES)
def test_admission_latency_at_saturation(
    benchmark: Any, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        where = create_store("sqlite", str(tmp_path / "tasks.sqlite3"))
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        where = create_store("postgres", server.create_database())
    result: dict[str, float] = {}

    def one_round() -> None:
        with FakeOpenCodeProcess() as fake, Workers() as workers:
            parents = make_parents(fake.url, PARENTS)
            procs = workers.add_all(
                [
                    WorkerProcess(fake.url, store_args(kind, where), *OPTIONS,
                                  log_dir=tmp_path / f"w{k}")
                    for k in range(WORKERS)
                ]
            )  # fmt: skip
            for proc in procs:
                proc.launch(TASKS // WORKERS, parents, f"[sleep:{SLEEP}] job {{i}}")
            for proc in procs:
                proc.launched(0, timeout=TIMEOUT)

            async def ended() -> list[Any]:
                async with open_store(kind, where) as store:
                    return list((await tasks_by_id(store)).values())

            done: list[Any] = []

            def all_ended() -> bool:
                done[:] = asyncio.run(ended())
                return len(done) >= TASKS and all(t.completed_at for t in done)

            wait_until(all_ended, TIMEOUT, "every task ended", every=1.0)
            result.update(measure(done, MAX_RUNNING))

    benchmark.pedantic(one_round, rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    benchmark.extra_info.update(
        {"workers": WORKERS, "max_running": MAX_RUNNING, "tasks": TASKS, "sleep_s": SLEEP}
    )
    print(kind, result)
    assert result["most_running"] <= MAX_RUNNING
