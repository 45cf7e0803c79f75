"""The task manager's own cost on the in-process backend, per store: `task()` latency (median,
p99, max over many launches, each after the previous task ended) and a burst of N tasks launched
together (completions per second until every one is completed and its parent told, and each
`task()`'s latency inside the burst).

    PYTHONPATH=python python3 benches/task_burst.py --store memory --store sqlite

Complements ``benches/test_bench_tasks.py`` (pytest-benchmark, medians of 10 rounds): this
script gives the tail, and runs on SQLite too.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    InProcessTurn,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    TaskStore,
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _instant(turn: InProcessTurn) -> str:
    return "done: " + turn.prompt


def _store(kind: str, folder: Path) -> TaskStore:
    if kind == "memory":
        return InMemoryTaskStore()
    return SQLiteTaskStore(folder / f"tasks-{time.monotonic_ns()}.db")


async def _until(cond: Callable[[], Awaitable[bool]], timeout: float = 120.0) -> None:
    end = time.perf_counter() + timeout
    while not await cond():
        if time.perf_counter() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.0005)


async def launches(kind: str, folder: Path, count: int) -> list[float]:
    """`task()` latency (ms) of `count` plain launches, each after the previous task ended."""
    backend = InProcessBackend(_instant)
    config = TaskManagerConfig(notify_parent=False, max_running=10_000)
    async with TaskManager(backend, _store(kind, folder), config) as manager:
        parent = str((await backend.create_session(title="bench parent"))["id"])
        out: list[float] = []
        for i in range(count + 5):  # 5 warm-up launches
            begin = time.perf_counter()
            task = await manager.task(parent, "go", "build", "bench")
            elapsed = (time.perf_counter() - begin) * 1000
            assert task.status is TaskStatus.RUNNING
            if i >= 5:
                out.append(elapsed)

            async def ended(task_id: str = task.id) -> bool:
                got = await manager.store.get(task_id)
                return got is not None and got.status is TaskStatus.COMPLETED

            await _until(ended)
            await manager.wait_idle()
        await manager.store.close()
    return out


async def burst(kind: str, folder: Path, n: int, rounds: int) -> tuple[list[float], list[float]]:
    """Completions per second of `rounds` bursts of `n` tasks over 4 parents, and every
    `task()`'s latency (ms) inside them."""
    backend = InProcessBackend(_instant)
    config = TaskManagerConfig(poll_interval=1.0, wake="never", max_running=10_000)
    rates: list[float] = []
    latencies: list[float] = []
    async with TaskManager(backend, _store(kind, folder), config) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        parents: list[str] = []
        for _ in range(rounds + 1):  # the first round warms up
            for parent in parents:
                await manager.clear(parent)
            await manager.wait_idle()
            parents = [str((await backend.create_session())["id"]) for _ in range(4)]
            manager.courier.delivered = 0
            manager.recorder.completions = 0
            round_latencies: list[float] = []

            async def one(
                i: int, parents: list[str] = parents, into: list[float] = round_latencies
            ) -> None:
                begin = time.perf_counter()
                await manager.task(parents[i % 4], f"job {i}", "build", f"job {i}")
                into.append((time.perf_counter() - begin) * 1000)

            begin = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))

            async def delivered() -> bool:
                return manager.courier.delivered >= n

            await _until(delivered)
            elapsed = time.perf_counter() - begin
            assert manager.completions == n, manager.completions
            rates.append(n / elapsed)
            latencies.extend(round_latencies)
        await manager.store.close()
    return rates[1:], latencies[n:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", choices=["memory", "sqlite"])
    parser.add_argument("--launches", type=int, default=300)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for kind in args.store or ["memory", "sqlite"]:
            lat = asyncio.run(launches(kind, folder, args.launches))
            print(
                f"{kind}: task() x{len(lat)}: median {statistics.median(lat):.3f} ms,"
                f" p99 {percentile(lat, 0.99):.3f} ms, max {max(lat):.3f} ms"
            )
            rates, in_burst = asyncio.run(burst(kind, folder, args.burst, args.rounds))
            print(
                f"{kind}: burst of {args.burst} x{len(rates)}: median"
                f" {statistics.median(rates):.0f} completions/s (best {max(rates):.0f});"
                f" task() in the burst: median {statistics.median(in_burst):.1f} ms,"
                f" p99 {percentile(in_burst, 0.99):.1f} ms"
            )


if __name__ == "__main__":
    main()
