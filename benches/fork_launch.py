"""The fork launch end to end, on a real ``opencode serve`` (answered by the fake model of
tests/e2e) with a parent of 2,000 generated messages imported into it.

Timed from outside the product: the backend is `OpenCodeBackend` with each call it makes
time-stamped around (a subclass), and the fork pipeline is `build_fork_context` timed around.
For each launch:

- ``task()``: from the call to its return (it stores the task and admits it: no call to
  OpenCode);
- then, in the background: the child session's creation (``POST /session``), for a fork
  ``GET /session/{id}/message``, the pipeline (on a worker thread) and the injection (a
  ``noReply`` prompt with the context), the prompt (``prompt_async``), and the gaps between
  them (the event loop, the thread hop, the task store).

Apart, the message list's read is taken apart: time to the response headers and to the last
byte, and what a read of only the newest messages (``?limit=N``, OpenCode's paging) costs.

    python3 benches/fork_launch.py --messages 2000 --launches 20 --plain 200 --shape mixed

The parent is imported with ``opencode import`` of an export document (``{info, messages}``)
made from ``benches/generate.py``'s session; the few fields OpenCode's schema requires and the
generator leaves out are filled in (`importable`). The older shape (`legacy`) cannot be
imported: OpenCode 1.18 refuses its tool parts (no `callID`, no `state.status`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from asyncagents import build_fork_context  # noqa: E402
from asyncagents.service.server import freeze_startup_heap  # noqa: E402
from asyncagents.tasks import (  # noqa: E402
    OpenCodeBackend,
    PromptRequest,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from e2e_support import OpenCodeServer, opencode_binary  # noqa: E402
from fake_model import FakeModel  # noqa: E402
from generate import SESSION, session_objects  # noqa: E402

NO_TOKENS = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def importable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The generated messages with what `opencode import` requires and the generator leaves
    out: a step-finish's cost and `tokens.cache.write`, a reasoning part's time."""
    for message in messages:
        created = message["info"]["time"]["created"]
        for part in message["parts"]:
            if part["type"] == "step-finish":
                part.setdefault("cost", 0)
                part.setdefault("tokens", json.loads(json.dumps(NO_TOKENS)))
                part["tokens"].setdefault("cache", {}).setdefault("write", 0)
            elif part["type"] == "reasoning":
                part.setdefault("time", {"start": created, "end": created})
    return messages


def import_parent(server: OpenCodeServer, size: int, shape: str) -> str:
    """A generated session of `size` messages imported into `server`'s store; its id."""
    now = int(time.time() * 1000)
    document = {
        "info": {
            "id": SESSION,
            "slug": "bench-parent",
            "projectID": "global",
            "directory": str(server.project),
            "path": str(server.project).lstrip("/"),
            "title": "bench parent",
            "version": "1.18.33",
            "time": {"created": now, "updated": now},
        },
        "messages": importable(session_objects(size, shape)),
    }
    path = server.root / "parent.json"
    path.write_text(json.dumps(document))
    done = subprocess.run(
        [opencode_binary(), "import", str(path)],
        cwd=server.project,
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"opencode import failed: {done.stdout[-500:]}{done.stderr[-2000:]}")
    return SESSION


Marks = dict[str, float]


class TimedBackend(OpenCodeBackend):
    """`OpenCodeBackend` with the start and end of each launch call stamped into `marks`
    (`time.perf_counter`), by the child session the call is for."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url, timeout=120.0)
        self.marks: dict[str, Marks] = {}
        self.reads: list[Marks] = []
        self.created: list[tuple[str, float, float]] = []

    async def create_session(
        self, *, parent_id: str | None = None, title: str | None = None
    ) -> Any:
        start = time.perf_counter()
        session = await super().create_session(parent_id=parent_id, title=title)
        self.created.append((str(session["id"]), start, time.perf_counter()))
        return session

    async def messages_raw(self, session_id: str) -> bytes:
        marks: Marks = {"read_start": time.perf_counter()}
        raw = await super().messages_raw(session_id)
        marks["read_end"] = time.perf_counter()
        marks["bytes"] = len(raw)
        self.reads.append(marks)
        return raw

    async def prompt(self, session_id: str, request: PromptRequest) -> Any:
        marks = self.marks.setdefault(session_id, {})
        marks["inject_start"] = time.perf_counter()
        out = await super().prompt(session_id, request)
        marks["inject_end"] = time.perf_counter()
        return out

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        marks = self.marks.setdefault(session_id, {})
        marks["prompt_start"] = time.perf_counter()
        await super().prompt_async(session_id, request)
        marks["prompt_end"] = time.perf_counter()


class TimedBuilder:
    """`build_fork_context` from bytes, its start and end stamped (it runs on a thread)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def __call__(self, raw: bytes, config: Any = None) -> Any:
        start = time.perf_counter()
        ctx = build_fork_context(raw, config)
        self.spans.append((start, time.perf_counter()))
        return ctx


async def until(cond: Callable[[], Any], timeout: float = 300.0) -> None:
    end = time.perf_counter() + timeout
    while not await cond():
        if time.perf_counter() > end:
            raise SystemExit("a launch did not reach its prompt in time")
        await asyncio.sleep(0.002)


async def launches(
    url: str, parent: str, count: int, fork: bool, store: Path, pause: float = 0.0
) -> list[Marks]:
    """`count` launches one after another, each waited for until the child's turn ended, then
    `pause` seconds (the manager's own work on that end done); the tasks in a SQLite store at
    `store` (the default kind)."""
    backend = TimedBackend(url)
    builder = TimedBuilder()
    manager = TaskManager(
        backend,
        SQLiteTaskStore(store),
        TaskManagerConfig(notify_parent=False, wake="never", max_running=10_000),
        fork_builder=builder,
    )
    await manager.start()
    freeze_startup_heap()  # as `asyncagents serve` does once started
    out: list[Marks] = []
    try:
        for _ in range(count + 1):  # the first is a warm-up
            called = time.perf_counter()
            task = await manager.task(parent, "go", "build", "bench", fork=fork)
            returned = time.perf_counter()
            assert task.session_id is None  # created in the background

            async def ended(task_id: str = task.id) -> bool:
                current = await manager.store.get(task_id)
                return current is not None and not current.status.active

            await until(ended)
            await asyncio.sleep(pause)
            current = await manager.store.get(task.id)
            assert current is not None and current.status is TaskStatus.COMPLETED, current
            assert current.session_id is not None
            marks = dict(backend.marks[current.session_id])
            marks.update(called=called, returned=returned)
            session_id, create_start, create_end = backend.created[-1]
            assert session_id == current.session_id
            marks.update(create_start=create_start, create_end=create_end)
            if fork:
                marks.update(backend.reads[-1])
                marks["build_start"], marks["build_end"] = builder.spans[-1]
            out.append(marks)
    finally:
        await manager.aclose()
        gc.unfreeze()
    return out[1:]


async def inprocess_launches(
    count: int, store: Path, pause: float = 0.0, freeze: bool = True
) -> list[float]:
    """`task()` in ms, `count` plain launches one after another (each waited for until its
    child ended, then `pause` s), on the in-process backend: the manager and its SQLite store
    alone, with no server process sharing the machine's cores. `freeze`: the heap as it is
    after start-up frozen, as `asyncagents serve` does (else every full collection walks it)."""
    from asyncagents.tasks import InProcessBackend
    from tasks_script import Script  # the tests' scripted replies

    backend = InProcessBackend(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    manager = TaskManager(
        backend,
        SQLiteTaskStore(store),
        TaskManagerConfig(notify_parent=False, wake="never", max_running=10_000),
    )
    await manager.start()
    if freeze:
        freeze_startup_heap()
    out: list[float] = []
    try:
        for _ in range(count + 1):
            called = time.perf_counter()
            task = await manager.task(parent, "go", "build", "bench")
            out.append((time.perf_counter() - called) * 1e3)

            async def ended(task_id: str = task.id) -> bool:
                current = await manager.store.get(task_id)
                return current is not None and not current.status.pending

            await until(ended)
            await asyncio.sleep(pause)
    finally:
        await manager.aclose()
        gc.unfreeze()
    return out[1:]


def stages(marks: Marks) -> dict[str, float]:
    """The spans of one forked launch, in ms."""
    spans = {
        "task() (stores the task, admits it)": ("called", "returned"),
        "task() returned -> session creation started": ("returned", "create_start"),
        "session creation (POST /session)": ("create_start", "create_end"),
        "session created -> GET started (the session recorded)": ("create_end", "read_start"),
        "GET /session/{id}/message": ("read_start", "read_end"),
        "GET ended -> pipeline started (thread hop)": ("read_end", "build_start"),
        "pipeline (Rust, from bytes)": ("build_start", "build_end"),
        "pipeline ended -> injection started": ("build_end", "inject_start"),
        "injection (noReply prompt with the context)": ("inject_start", "inject_end"),
        "injection ended -> prompt started (fork stats stored)": ("inject_end", "prompt_start"),
        "prompt (prompt_async)": ("prompt_start", "prompt_end"),
        "task() returned -> prompt sent": ("returned", "prompt_end"),
    }
    return {name: (marks[b] - marks[a]) * 1e3 for name, (a, b) in spans.items()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def read_apart(url: str, parent: str, rounds: int) -> list[str]:
    """The message list's read: to the headers, to the last byte; and newest-N pages."""
    lines = []
    with httpx.Client(base_url=url, timeout=300.0) as client:
        heads, bodies = [], []
        size = 0
        for _ in range(rounds):
            start = time.perf_counter()
            with client.stream("GET", f"/session/{parent}/message") as response:
                heads.append(time.perf_counter() - start)
                size = sum(len(chunk) for chunk in response.iter_bytes())
            bodies.append(time.perf_counter() - start)
        lines.append(
            f"- the whole list ({size / 1e6:.1f} MB): headers after"
            f" {statistics.median(heads) * 1e3:.0f} ms, last byte after"
            f" {statistics.median(bodies) * 1e3:.0f} ms (medians of {rounds})"
        )
        for limit in (50, 200, 800):
            spans = []
            for _ in range(rounds):
                start = time.perf_counter()
                response = client.get(f"/session/{parent}/message", params={"limit": limit})
                response.raise_for_status()
                spans.append(time.perf_counter() - start)
            lines.append(
                f"- the newest {limit} (`?limit={limit}`, {len(response.content) / 1e6:.1f} MB):"
                f" {statistics.median(spans) * 1e3:.0f} ms"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--shape", default="mixed")
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--plain", type=int, default=50, help="plain launches, for task() alone")
    args = parser.parse_args(argv)
    model = FakeModel().start()
    root = Path(tempfile.mkdtemp(prefix="fork-launch-"))
    server = OpenCodeServer(opencode_binary(), model.base_url, root)
    try:
        server.start()
        started = time.perf_counter()
        parent = import_parent(server, args.messages, args.shape)
        print(
            f"imported {args.messages:,} `{args.shape}` messages in"
            f" {time.perf_counter() - started:.1f} s\n"
        )
        forked = asyncio.run(
            launches(server.base_url, parent, args.launches, True, root / "forked.sqlite3")
        )
        table = [stages(marks) for marks in forked]
        print(
            f"Forked launches from the {args.messages:,}-message parent"
            f" ({len(forked)} launches, one at a time, after a warm-up one;"
            f" {forked[0]['bytes'] / 1e6:.1f} MB read):\n"
        )
        whole = statistics.median(t["task() returned -> prompt sent"] for t in table)
        print("| stage | median | p90 | share of returned -> prompt sent |")
        print("|---|---:|---:|---:|")
        for name in table[0]:
            values = [t[name] for t in table]
            median = statistics.median(values)
            share = "" if name.startswith("task() (") else (f"{median / whole:.0%}")
            print(
                f"| {name.strip()} | {median:.1f} ms | {percentile(values, 0.9):.1f} ms | {share} |"
            )
        returned = [t["task() (stores the task, admits it)"] for t in table]
        plain = asyncio.run(
            launches(server.base_url, parent, args.plain, False, root / "plain.sqlite3")
        )
        plain_returned = [(m["returned"] - m["called"]) * 1e3 for m in plain]
        paused = asyncio.run(
            launches(server.base_url, parent, args.plain, False, root / "paused.sqlite3", 0.2)
        )
        paused_returned = [(m["returned"] - m["called"]) * 1e3 for m in paused]
        created = [(m["create_end"] - m["create_start"]) * 1e3 for m in [*forked, *plain]]
        plain_sent = [(m["prompt_end"] - m["returned"]) * 1e3 for m in plain]
        print()
        for label, values in (
            ("forked", returned),
            ("plain, each right after the previous child ended", plain_returned),
            ("plain, each 200 ms after the previous child ended", paused_returned),
            ("all", [*returned, *plain_returned, *paused_returned]),
        ):
            print(
                f"- `task()` {label}: median {statistics.median(values):.1f} ms,"
                f" p99 {percentile(values, 0.99):.1f} ms, max {max(values):.1f} ms"
                f" ({len(values)} launches)"
            )
        for label, values in (
            ("`POST /session` (after `task()` returned)", created),
            ("plain: `task()` returned -> prompt sent", plain_sent),
        ):
            print(
                f"- {label}: median {statistics.median(values):.1f} ms,"
                f" p99 {percentile(values, 0.99):.1f} ms, max {max(values):.1f} ms"
                f" ({len(values)} launches)"
            )
        for pause, freeze in ((0.0, True), (0.2, True), (0.0, False)):
            alone = asyncio.run(
                inprocess_launches(
                    args.plain, root / f"inprocess-{pause}-{freeze}.sqlite3", pause, freeze
                )
            )
            print(
                f"- `task()` plain on the in-process backend (no server process),"
                f"{'' if freeze else ' the heap not frozen,'} each"
                f" {pause * 1e3:.0f} ms after the previous child ended:"
                f" median {statistics.median(alone):.1f} ms, p99 {percentile(alone, 0.99):.1f} ms,"
                f" max {max(alone):.1f} ms ({len(alone)} launches)"
            )
        print()
        print("\n".join(read_apart(server.base_url, parent, rounds=3)))
    finally:
        server.stop()
        model.stop()


if __name__ == "__main__":
    main()
