"""The task service over 100,000 finished tasks, on SQLite and on PostgreSQL.

For each store: fill it with `--tasks` finished tasks (three months of an agent server's history:
four agents, three models, three end states, tool calls by name, tokens and cost, prompts and
results of a few hundred words, 20 tasks a parent session and 5 parents a tree),
start the service as ``asyncagents serve`` runs it (`asyncagents.service.server.serve`, uvicorn on
127.0.0.1) over a real ``opencode serve``, then:

- idle: with no client, the service process's CPU time (``/proc/<pid>/stat`` utime + stime) and
  its resident memory (``VmRSS``, and the peak ``VmHWM``) over `--idle` seconds;
- latency: each request `--repeat` times over loopback with one keep-alive client, after three
  warm-up calls; median and p95 in ms.

Run: ``python benches/service_scale.py [--tasks 100000] [--stores sqlite,postgres]``. It prints a
Markdown table (the one in docs/service-api.md) and writes the numbers as JSON to `--json`.
PostgreSQL is a throwaway cluster started as the tests start it (tests/pg_server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from asyncagents.tasks.models import Task, TaskProgress, TaskStatus, TaskUsage  # noqa: E402
from asyncagents.tasks.store import SQLiteTaskStore  # noqa: E402
from asyncagents.tasks.store.rows import (  # noqa: E402
    REBUILD_TOTALS,
    USAGE_COLUMNS,
    usage_values,
)

TOKEN = "bench-token-0123456789abcdef0123456789"
AGENTS = ("general", "explore", "build", "review")
TOOLS = ("read", "grep", "bash", "edit", "glob", "webfetch")
MODELS = ("anthropic/claude-sonnet-4", "openai/gpt-5-mini", "google/gemini-2.5-flash")
WORDS = (
    "module parser cache index request handler schema migration test fixture queue worker "
    "lease notice session prompt result error config option route token page cursor filter "
    "search stats duration backend store server client stream event snapshot reconcile"
).split()
#: one task in a hundred mentions it in its prompt: the search of the benchmark
RARE = "flakiness"
DAY_MS = 24 * 3600 * 1000


def make_tasks(n: int, backend: str, seed: int = 7) -> Iterator[Task]:
    """`n` finished tasks, one a minute, ending now; deterministic for a given `seed`."""
    rng = random.Random(seed)
    start = time.time_ns() // 1_000_000 - n * 60_000
    for i in range(n):
        created = start + i * 60_000
        took = rng.randint(2_000, 900_000)
        roll = rng.random()
        status = (
            TaskStatus.COMPLETED
            if roll < 0.8
            else TaskStatus.ERROR
            if roll < 0.92
            else TaskStatus.CANCELLED
        )
        prompt_words = [rng.choice(WORDS) for _ in range(60)]
        if i % 100 == 0:
            prompt_words.insert(rng.randrange(60), RARE)
        tools: dict[str, int] = {}
        for _ in range(rng.randint(0, 12)):
            name = rng.choice(TOOLS)
            tools[name] = tools.get(name, 0) + 1
        model = MODELS[i % len(MODELS)]
        usage = TaskUsage(
            input_tokens=rng.randint(2_000, 60_000),
            output_tokens=rng.randint(200, 4_000),
            cache_read_tokens=rng.randint(0, 40_000),
            cost=rng.randint(1, 5_000) / 10_000,
        )
        yield Task(
            id=f"tsk_{created:012x}{i:06x}{rng.getrandbits(32):08x}",
            parent_session_id=f"ses_parent{i // 20:06d}",
            root_session_id=f"ses_parent{i // 100 * 5:06d}",
            depth=1 if i // 20 % 5 == 0 else 2,
            model=model,
            usage=usage,
            turn_usage=usage,
            usage_by_model={model: usage},
            session_id=f"ses_child{i:07d}",
            prompt=" ".join(prompt_words).capitalize() + ".",
            agent=AGENTS[i % len(AGENTS)],
            description=f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)} {i}",
            status=status,
            created_at=created,
            updated_at=created + took,
            completed_at=created + took,
            result=(
                " ".join(rng.choice(WORDS) for _ in range(120))
                if status is TaskStatus.COMPLETED
                else None
            ),
            error="Aborted by the parent" if status is not TaskStatus.COMPLETED else None,
            result_retrieved_at=created + took + 1_000,
            progress=TaskProgress(
                tool_calls=sum(tools.values()), last_tool=next(iter(tools), None), tools=tools
            ),
            backend=backend,
        )


# -- filling the stores (one transaction per chunk; the rows are what `insert` writes) ---------


def fill_sqlite(path: Path, tasks: Iterator[Task]) -> None:
    from asyncagents.tasks.store import sqlite as module

    store = SQLiteTaskStore(path)

    async def run() -> None:
        await store.open()
        chunk: list[Task] = []

        def write(db: Any) -> None:
            db.executemany(
                f"INSERT INTO tasks ({module._WRITTEN}, id) VALUES ({module._PLACES}, ?)",
                [store._task_values(t) for t in chunk],
            )
            for t in chunk:
                store._save_footprint(db, t, None, totals=False)

        for task in tasks:
            chunk.append(task)
            if len(chunk) == 5000:
                await store._write("filling", write)
                chunk = []
        if chunk:
            await store._write("filling", write)

        def totals(db: Any) -> None:
            for statement in REBUILD_TOTALS:
                db.execute(statement)

        await store._write("totals", totals)
        await store._run("analysing", lambda db: db.execute("ANALYZE"))
        await store.close()

    asyncio.run(run())


def fill_postgres(dsn: str, tasks: Iterator[Task]) -> None:
    from asyncagents.tasks.store.postgres import _WRITTEN, PostgresTaskStore

    store = PostgresTaskStore(dsn, statement_timeout=3600)

    async def run() -> None:
        await store.open()
        async with store._connection("filling") as conn:
            async with conn.transaction(), conn.cursor() as cur:
                async with cur.copy(f"COPY tasks ({_WRITTEN}, id) FROM STDIN") as copy:
                    tools = []
                    models = []
                    for task in tasks:
                        await copy.write_row(store._task_values(task))
                        tools += [
                            (task.id, task.backend, task.parent_session_id, name, calls)
                            for name, calls in task.progress.tools.items()
                        ]
                        models += [
                            (task.id, task.backend, task.parent_session_id, name, *usage_values(u))
                            for name, u in task.usage_by_model.items()
                        ]
                async with cur.copy(
                    "COPY task_tools (task_id, backend, parent_session_id, tool, calls) FROM STDIN"
                ) as copy:
                    for row in tools:
                        await copy.write_row(row)
                async with cur.copy(
                    f"COPY task_models (task_id, backend, parent_session_id, model, "
                    f"{', '.join(USAGE_COLUMNS)}) FROM STDIN"
                ) as copy:
                    for row in models:
                        await copy.write_row(row)
                for statement in REBUILD_TOTALS:
                    await cur.execute(statement)
            await conn.execute("VACUUM ANALYZE tasks")
            await conn.execute("VACUUM ANALYZE task_tools")
            await conn.execute("VACUUM ANALYZE task_models")
        await store.close()

    asyncio.run(run())


# -- the service process ----------------------------------------------------------------------


def serve_child(store: str, opencode_url: str, port: int) -> int:
    """Run the service as ``asyncagents serve`` does, over a SQLite path or ``pg:<DSN>``."""
    from asyncagents.service import server
    from asyncagents.service.settings import ServeSettings, Settings
    from asyncagents.tasks import OpenCodeBackend, TaskManager, TaskManagerConfig

    if store.startswith("pg:"):
        from asyncagents.tasks.store.postgres import PostgresTaskStore

        dsn = store.removeprefix("pg:")  # a key=value DSN, which --store does not take

        def build(settings: Settings) -> TaskManager:
            backend = OpenCodeBackend(settings.serve.opencode)
            return TaskManager(backend, PostgresTaskStore(dsn), settings.manager)

        async def problem(settings: Settings) -> str | None:
            pg = PostgresTaskStore(dsn)
            try:
                await pg.open()
            finally:
                await pg.close()
            return None

        server.build_manager = build
        server._store_problem = problem
        store = ""
    settings = Settings(
        serve=ServeSettings(opencode=opencode_url, port=port, store=store or None),
        manager=TaskManagerConfig(),
    )
    return server.serve(settings, TOKEN)


def _proc_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def measure(
    store: str, opencode_url: str, idle: float, repeat: int, log: Path, expected: int
) -> dict[str, Any]:
    from e2e_support import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-child", store, opencode_url, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited: {log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/v1/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the service did not start")
                time.sleep(0.2)
            time.sleep(5)  # past the start (adoption, first lease and notice rounds)
            cpu0, wall0 = _proc_seconds(proc.pid), time.monotonic()
            time.sleep(idle)
            cpu = (_proc_seconds(proc.pid) - cpu0) / (time.monotonic() - wall0)
            out = {
                "idle_cpu_percent": round(cpu * 100, 2),
                "idle_rss_mb": round(_proc_kib(proc.pid, "VmRSS") / 1024, 1),
            }
            first = http.get("/v1/tasks?limit=100").json()
            requests = {
                "GET /v1/tasks?limit=100": "/v1/tasks?limit=100",
                "next page (cursor)": f"/v1/tasks?limit=100&cursor={first['next_cursor']}",
                "status=error": "/v1/tasks?limit=100&status=error",
                "agent=review, sort=-updated_at": "/v1/tasks?limit=100&agent=review"
                "&sort=-updated_at",
                f"q={RARE} (1 task in 100)": f"/v1/tasks?limit=100&q={RARE}",
                "q=no-such-text (no match)": "/v1/tasks?limit=100&q=no-such-text",
                "GET /v1/stats": "/v1/stats",
                "GET /v1/stats?parent=...": "/v1/stats?parent=ses_parent000042",
            }
            out["total"] = first["total"]
            if first["total"] != expected:
                raise RuntimeError(f"the service lists {first['total']} tasks, not {expected}")
            out["latency_ms"] = {}
            for name, path in requests.items():
                for _ in range(3):
                    assert http.get(path).status_code == 200, path
                samples = []
                for _ in range(repeat):
                    began = time.perf_counter()
                    response = http.get(path)
                    samples.append((time.perf_counter() - began) * 1000)
                    assert response.status_code == 200, (path, response.text)
                samples.sort()
                out["latency_ms"][name] = {
                    "median": round(statistics.median(samples), 2),
                    "p95": round(samples[max(0, int(len(samples) * 0.95 + 0.5) - 1)], 2),
                }
            out["peak_rss_mb"] = round(_proc_kib(proc.pid, "VmHWM") / 1024, 1)
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve-child", nargs=3, metavar=("STORE", "OPENCODE", "PORT"))
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle measurement")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.serve_child:
        store, url, port = args.serve_child
        return serve_child(store, url, int(port))

    from e2e_support import running_server
    from fake_model import FakeModel
    from pg_server import running_postgres

    results: dict[str, Any] = {
        "tasks": args.tasks,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    root = Path(tempfile.mkdtemp(prefix="asyncagents-scale-"))
    model = FakeModel().start()
    with contextlib.ExitStack() as stack:
        # the filled store is large (about 600 MB): gone with the run, even a failed one
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        opencode = stack.enter_context(running_server(model, root / "opencode"))
        url = opencode.base_url
        for kind in args.stores.split(","):
            began = time.monotonic()
            if kind == "sqlite":
                target = str(root / "tasks.sqlite3")
                fill_sqlite(Path(target), make_tasks(args.tasks, url))
            else:
                postgres = stack.enter_context(running_postgres())
                dsn = postgres.create_database("scale")
                fill_postgres(dsn, make_tasks(args.tasks, url))
                target = f"pg:{dsn}"
            filled = time.monotonic() - began
            print(f"{kind}: {args.tasks} tasks stored in {filled:.0f} s", flush=True)
            results[kind] = measure(
                target, url, args.idle, args.repeat, root / f"{kind}.log", args.tasks
            )
            print(json.dumps(results[kind], indent=1), flush=True)
    model.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


def table(results: dict[str, Any]) -> str:
    stores = [k for k in ("sqlite", "postgres") if k in results]
    head = "| | " + " | ".join(f"{k} median / p95 (ms)" for k in stores) + " |"
    lines = [head, "|" + "---|" * (len(stores) + 1)]
    for name in results[stores[0]]["latency_ms"]:
        cells = [
            f"{results[k]['latency_ms'][name]['median']} / {results[k]['latency_ms'][name]['p95']}"
            for k in stores
        ]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    for key, label in (
        ("idle_cpu_percent", "idle CPU (% of a core)"),
        ("idle_rss_mb", "idle RSS (MB)"),
        ("peak_rss_mb", "peak RSS after the requests (MB)"),
    ):
        lines.append(f"| {label} | " + " | ".join(str(results[k][key]) for k in stores) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
