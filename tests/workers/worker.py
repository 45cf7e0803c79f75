"""One worker process of a multi-process deployment: a `TaskManager` over an OpenCode server and
a shared store, driven by the multi-process tests and benchmarks (and usable by hand).

Run from the repository root, with the package installed::

    python tests/workers/worker.py --url http://127.0.0.1:4096 --sqlite /tmp/tasks.sqlite3 \
        --lease-ttl 6 --launch 100 --parents ses_a,ses_b --prompt "job {i} [sleep:1]"

    python -m tests.workers.worker --url ... --postgres "host=127.0.0.1 port=5432 dbname=x"

The store is ``--sqlite PATH`` or ``--postgres DSN``; the manager's knobs (`TaskManagerConfig`)
come from the other options (the admission caps: ``--max-running``, ``--max-running-per-parent``,
``--max-queued-per-parent``, ``--max-running-per-agent JSON``, ``--max-running-per-model JSON``,
``--model provider/model``; by default no cap binds; tries again after a provider error:
``--attempts``, ``--retry-initial``, ``--retry-max``). With ``--launch N`` the worker launches N
tasks at start (spread over ``--parents`` in turn); without, it only follows (takes over what
dead workers of its backend left). It also reads commands from stdin, one JSON object per line:

- ``{"cmd": "launch", "count": N, "parents": [...], "prompt": "job {i}", "agent": "build",
  "fork": false}`` (``agent`` may also be a list, used in turn)
- ``{"cmd": "stats"}``: print a stats line now;
- ``{"cmd": "stop"}``: close and exit (as SIGTERM and SIGINT do; so does the end of stdin).

It prints one JSON object per line on stdout (flushed), each with an ``"event"``:

- ``ready``: ``pid``, ``instance_id``, ``backend_name``, once the manager has started;
- ``launched``: ``count``, ``task_ids`` (in launch order), ``errors`` (texts of failed
  launches), ``seconds`` (wall time of the batch);
- ``task``: ``kind`` (``task.completed``, ``task.error``, ``task.cancelled``, ``task.cleared``),
  ``task_id``, ``status``, ``owner``: every end of a task this worker recorded;
- ``stats`` (every ``--stats-interval`` s and on request): ``following`` (runs followed now),
  ``completions``, ``taken_over``, ``delivered`` (notices), ``rss_kb``;
- ``stopped``: ``reason``, after a clean close (exit status 0); ``fatal``: ``error`` (status 1);
- ``bad_command``: ``line``, ``error``; ``no_commands``: stdin cannot be watched (a regular
  file), so only signals stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from asyncagents.tasks import (
    OpenCodeBackend,
    SQLiteTaskStore,
    TaskChange,
    TaskManager,
    TaskManagerConfig,
    TaskStore,
)

#: launches in flight at once per worker (each creates a session and stores a task)
LAUNCH_CONCURRENCY = 16
#: the kinds of change printed as ``task`` lines: the ends of a task
END_KINDS = frozenset({"task.completed", "task.error", "task.cancelled", "task.cleared"})


def emit(event: str, **fields: Any) -> None:
    """One progress line on stdout."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def rss_kb() -> int:
    """This process's resident set size (VmRSS), in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A TaskManager worker process.")
    parser.add_argument("--url", required=True, help="the OpenCode server's base URL")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite", metavar="PATH", help="a SQLite store file")
    where.add_argument("--postgres", metavar="DSN", help="a PostgreSQL store DSN")
    parser.add_argument("--pg-pool-size", type=int, default=4, help="PostgreSQL pool max_size")
    parser.add_argument("--backend-name", default=None)
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--stall-timeout", type=float, default=60.0)
    parser.add_argument("--notice-claim-ttl", type=float, default=60.0)
    parser.add_argument("--notice-interval", type=float, default=1.0)
    parser.add_argument("--notice-retry-initial", type=float, default=1.0)
    parser.add_argument("--wake", choices=["each", "all_done", "never"], default="each")
    parser.add_argument("--no-events", action="store_true", help="follow by polling only")
    parser.add_argument("--launch", type=int, default=0, help="tasks to launch at start")
    parser.add_argument("--parents", default="", help="comma-separated parent session ids")
    parser.add_argument("--prompt", default="job {i}", help="prompt template; {i}, {worker}")
    parser.add_argument("--agent", default="build")
    parser.add_argument("--stats-interval", type=float, default=1.0)
    # the admission queue's caps; by default high enough that no task waits (the tests of
    # other things launch hundreds at once)
    parser.add_argument("--max-running", type=int, default=10_000)
    parser.add_argument("--max-running-per-parent", type=int, default=None)
    parser.add_argument("--max-queued-per-parent", type=int, default=10_000)
    parser.add_argument("--max-running-per-agent", type=json.loads, default={}, metavar="JSON")
    parser.add_argument("--max-running-per-model", type=json.loads, default={}, metavar="JSON")
    parser.add_argument("--admission-interval", type=float, default=1.0)
    parser.add_argument("--model", default=None, help="provider/model of the children")
    # tries again after a provider error
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--retry-initial", type=float, default=30.0)
    parser.add_argument("--retry-max", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.launch and not args.parents:
        parser.error("--launch needs --parents")
    return args


def make_store(args: argparse.Namespace) -> TaskStore:
    if args.sqlite:
        return SQLiteTaskStore(args.sqlite)
    from asyncagents.tasks.store import PostgresTaskStore

    store: TaskStore = PostgresTaskStore(args.postgres, max_size=args.pg_pool_size)
    return store


def make_config(args: argparse.Namespace) -> TaskManagerConfig:
    return TaskManagerConfig(
        backend_name=args.backend_name,
        instance_id=args.instance_id,
        lease_ttl=args.lease_ttl,
        poll_interval=args.poll_interval,
        stall_timeout=args.stall_timeout,
        notice_claim_ttl=args.notice_claim_ttl,
        notice_interval=args.notice_interval,
        notice_retry_initial=args.notice_retry_initial,
        wake=args.wake,
        follow_events=not args.no_events,
        max_running=args.max_running,
        max_running_per_parent=args.max_running_per_parent,
        max_queued_per_parent=args.max_queued_per_parent,
        max_running_per_agent=args.max_running_per_agent,
        max_running_per_model=args.max_running_per_model,
        admission_interval=args.admission_interval,
        attempts=args.attempts,
        retry_initial=args.retry_initial,
        retry_max=args.retry_max,
        model=dict(zip(("providerID", "modelID"), args.model.split("/", 1), strict=True))
        if args.model
        else None,
    )


class Worker:
    """The manager, its launches, its stats loop and its stop signal."""

    def __init__(self, manager: TaskManager, args: argparse.Namespace) -> None:
        self.manager = manager
        self.args = args
        self.stop_reason: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._launched = 0

    def stop(self, reason: str) -> None:
        if not self.stop_reason.done():
            self.stop_reason.set_result(reason)

    def on_change(self, change: TaskChange) -> None:
        if change.kind in END_KINDS:
            task = change.task
            emit(
                "task",
                kind=change.kind,
                task_id=task.id,
                status=task.status.value,
                owner=task.owner,
            )

    def stats(self) -> None:
        emit(
            "stats",
            following=len(self.manager.registry),
            completions=self.manager.completions,
            taken_over=self.manager.leases.taken_over,
            delivered=self.manager.courier.delivered,
            rss_kb=rss_kb(),
        )

    async def launch(
        self,
        count: int,
        parents: Sequence[str],
        prompt: str,
        agent: str | Sequence[str],
        fork: bool = False,
    ) -> None:
        """Launch `count` tasks over `parents` (and `agent`s) in turn; one ``launched`` line."""
        agents = [agent] if isinstance(agent, str) else list(agent)
        begin = time.monotonic()
        first = self._launched
        self._launched += count
        gate = asyncio.Semaphore(LAUNCH_CONCURRENCY)
        worker = os.getpid()

        async def one(i: int) -> str | BaseException:
            async with gate:
                try:
                    task = await self.manager.task(
                        parents[i % len(parents)],
                        prompt.format(i=i, worker=worker),
                        agent=agents[i % len(agents)],
                        description=f"job {i}",
                        fork=fork,
                    )
                except Exception as exc:
                    return exc
                return task.id

        results = await asyncio.gather(*(one(first + k) for k in range(count)))
        emit(
            "launched",
            count=count,
            task_ids=[r for r in results if isinstance(r, str)],
            errors=[f"{type(r).__name__}: {r}" for r in results if not isinstance(r, str)],
            seconds=round(time.monotonic() - begin, 4),
        )

    async def stats_loop(self) -> None:
        while True:
            await asyncio.sleep(self.args.stats_interval)
            self.stats()

    async def commands(self) -> None:
        """Read stdin commands until ``stop`` or the end of stdin."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        except (ValueError, OSError) as exc:  # stdin a regular file: run on signals only
            emit("no_commands", error=str(exc))
            return
        launches: set[asyncio.Task[None]] = set()
        while True:
            line = await reader.readline()
            if not line:
                self.stop("stdin closed")
                return
            try:
                command = json.loads(line)
                name = command["cmd"]
            except (ValueError, KeyError, TypeError) as exc:
                emit("bad_command", line=line.decode(errors="replace").strip(), error=str(exc))
                continue
            if name == "launch":
                job = loop.create_task(
                    self.launch(
                        int(command["count"]),
                        list(command["parents"]),
                        str(command.get("prompt", "job {i}")),
                        command.get("agent", "build"),
                        bool(command.get("fork", False)),
                    )
                )
                launches.add(job)
                job.add_done_callback(launches.discard)
            elif name == "stats":
                self.stats()
            elif name == "stop":
                self.stop("stop command")
                return
            else:
                emit("bad_command", line=line.decode(errors="replace").strip(), error="unknown")


async def run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    backend = OpenCodeBackend(args.url)
    store = make_store(args)
    manager = TaskManager(backend, store, make_config(args))
    worker = Worker(manager, args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop, signal.Signals(sig).name)
    manager.add_listener(worker.on_change)
    background: list[asyncio.Task[None]] = []
    try:
        await manager.start()
        emit(
            "ready",
            pid=os.getpid(),
            instance_id=manager.instance_id,
            backend_name=manager.backend_name,
        )
        background.append(loop.create_task(worker.stats_loop()))
        background.append(loop.create_task(worker.commands()))
        if args.launch:
            parents = [p for p in args.parents.split(",") if p]
            background.append(
                loop.create_task(worker.launch(args.launch, parents, args.prompt, args.agent))
            )
        reason = await worker.stop_reason
        for job in background:
            job.cancel()
        for job in background:
            with contextlib.suppress(asyncio.CancelledError):
                await job
        worker.stats()
        await manager.aclose()
        emit("stopped", reason=reason)
        return 0
    except Exception as exc:
        emit("fatal", error=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            await manager.aclose()
        return 1


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(asyncio.run(run(parse_args(argv))))


if __name__ == "__main__":
    main()
