"""One worker process of the multi-process manager tests: a `TaskManager` on a shared store.

``python task_worker.py --url URL --store sqlite:PATH|postgres:DSN --instance-id ID
[--backend-name NAME] [--lease-ttl S] [--wake MODE] [--parents P1,P2] [--count N]
[--prompt TEXT-WITH-{i}] [--wait-go]``: starts the manager (with `--wait-go`, prints ``ready``
and waits for a line on stdin, so that benchmarks time the work, not the start), launches
`count` tasks over the parents (round robin), prints one JSON line ``{"launched": [ids]}``,
then works (follows tasks, takes over those of dead workers, delivers notices) until SIGTERM,
when it closes gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from asyncagents.tasks import (
    OpenCodeBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStore,
)
from asyncagents.tasks.store.postgres import PostgresTaskStore


def open_store(spec: str) -> TaskStore:
    """``sqlite:<path>`` or ``postgres:<dsn>``."""
    kind, _, target = spec.partition(":")
    if kind == "sqlite":
        return SQLiteTaskStore(target)
    if kind == "postgres":
        return PostgresTaskStore(target, max_size=4)
    raise SystemExit(f"unknown store {spec!r}")


async def work(args: argparse.Namespace) -> None:
    store = open_store(args.store)
    backend = OpenCodeBackend(args.url)
    config = TaskManagerConfig(
        backend_name=args.backend_name,
        instance_id=args.instance_id,
        lease_ttl=args.lease_ttl,
        poll_interval=args.poll,
        wake=args.wake,
        notice_retry_initial=0.2,
        notice_retry_max=2.0,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    manager = TaskManager(backend, store, config)
    await manager.start()
    parents = [p for p in args.parents.split(",") if p]
    limit = asyncio.Semaphore(16)

    async def launch(i: int) -> str:
        async with limit:
            task = await manager.task(
                parents[i % len(parents)], args.prompt.format(i=i), args.agent, f"job {i}"
            )
            return task.id

    if args.wait_go:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    launched = await asyncio.gather(*(launch(i) for i in range(args.count))) if parents else []
    print(json.dumps({"launched": launched}), flush=True)
    await stop.wait()
    await manager.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--backend-name", default=None)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--wake", default="each")
    parser.add_argument("--parents", default="")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--prompt", default="job {i}")
    parser.add_argument("--agent", default="general")
    parser.add_argument(
        "--wait-go", action="store_true", help='print "ready", launch after a line on stdin'
    )
    asyncio.run(work(parser.parse_args()))


if __name__ == "__main__":
    main()
