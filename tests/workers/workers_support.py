"""Support of the multi-process tests and benchmarks: worker processes (tests/workers/worker.py)
driven over stdin/stdout, the notices a server's parents received, and the store read back.

Every process started here is stopped by its PID (`WorkerProcess.stop`, in ``finally`` blocks or
the `Workers` context manager).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from asyncagents.tasks import SQLiteTaskStore, Task, TaskStore
from subprocess_env import python_path

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "worker.py"
#: the first line of every notice (asyncagents.tasks.notices.notice_tag)
NOTICE_TAG = re.compile(r"\[asyncagents notice ([A-Za-z0-9_]+)\]")
#: the task a notice is about (its last line names it)
NOTICE_TASK = re.compile(r'asyncagents_output\(task_id="([A-Za-z0-9_]+)"\)')

Event = dict[str, Any]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": python_path(REPO)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class WorkerProcess:
    """One worker process; its JSON lines are collected by a reader thread."""

    def __init__(self, url: str, store: Sequence[str], *options: str, log_dir: Path) -> None:
        self.args = [sys.executable, str(WORKER), "--url", url, *store, *options]
        self.log_dir = log_dir
        self.process: subprocess.Popen[str] | None = None
        self.events: list[Event] = []
        self.other_lines: list[str] = []
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None
        self.ready: Event = {}
        self.stderr_path = log_dir / "worker.stderr"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def instance_id(self) -> str:
        return str(self.ready["instance_id"])

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> WorkerProcess:
        """Start the process; with `wait`, wait for its ``ready`` line."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                self.args,
                cwd=REPO,
                env=_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        self.ready = self.wait_for("ready", timeout=timeout)
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._changed:
                if isinstance(event, dict) and "event" in event:
                    self.events.append(event)
                else:
                    self.other_lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def stderr_tail(self, chars: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no stderr)"

    def of(self, name: str) -> list[Event]:
        with self._changed:
            return [e for e in self.events if e["event"] == name]

    def wait_for(
        self, name: str, where: Callable[[Event], bool] = lambda e: True, timeout: float = 60.0
    ) -> Event:
        """The first `name` event for which `where` holds; fails after `timeout` s or at exit."""
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.events:
                    if event["event"] == name and where(event):
                        return event
                if self.process is None or self.process.poll() is not None:
                    if self._reader is None or not self._reader.is_alive():
                        raise AssertionError(
                            f"worker {self.args[2:]} exited before {name!r}; stderr:\n"
                            f"{self.stderr_tail()}"
                        )
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"worker did not print {name!r} within {timeout:g}s; stderr:\n"
                        f"{self.stderr_tail()}"
                    )
                self._changed.wait(min(left, 0.5))

    def send(self, command: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def launch(
        self,
        count: int,
        parents: Sequence[str],
        prompt: str,
        agent: str | Sequence[str] = "build",
        *,
        fork: bool = False,
    ) -> int:
        """Ask for `count` launches; returns how many ``launched`` lines came before."""
        before = len(self.of("launched"))
        self.send(
            {"cmd": "launch", "count": count, "parents": list(parents), "prompt": prompt,
             "agent": agent if isinstance(agent, str) else list(agent), "fork": fork}
        )  # fmt: skip
        return before

    def launched(self, before: int = 0, timeout: float = 120.0) -> Event:
        """The ``launched`` line after `before` earlier ones."""
        self.wait_for("launched", timeout=timeout)
        end = time.monotonic() + timeout
        while len(self.of("launched")) <= before:
            if time.monotonic() > end:
                raise AssertionError(f"no launch answer within {timeout:g}s")
            time.sleep(0.05)
        return self.of("launched")[before]

    def completed(self) -> int:
        """How many ``task.completed`` lines this worker printed."""
        with self._changed:
            return sum(
                1 for e in self.events if e["event"] == "task" and e["kind"] == "task.completed"
            )

    def stats(self, timeout: float = 30.0) -> Event:
        """A fresh stats line, asked for now."""
        before = len(self.of("stats"))
        self.send({"cmd": "stats"})
        end = time.monotonic() + timeout
        while len(self.of("stats")) <= before:
            if time.monotonic() > end or (self.process is not None and self.process.poll()):
                raise AssertionError(f"no stats within {timeout:g}s; {self.stderr_tail()}")
            time.sleep(0.02)
        return self.of("stats")[-1]

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, and the exit status of the clean stop (fails if it does not exit)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} did not exit within {timeout:g}s of SIGTERM; stderr:\n"
                f"{self.stderr_tail()}"
            ) from None

    def kill(self) -> None:
        """kill -9, by PID."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Whatever state it is in: SIGTERM, then SIGKILL; close its pipes."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self._reader is not None:
            self._reader.join(5)


@dataclass
class Workers:
    """Several worker processes started together and stopped together."""

    all: list[WorkerProcess] = field(default_factory=list)

    def add(self, worker: WorkerProcess) -> WorkerProcess:
        self.all.append(worker)
        return worker.start()

    def add_all(self, workers: Sequence[WorkerProcess]) -> list[WorkerProcess]:
        """Start them all at once, then wait until each is ready."""
        for worker in workers:
            self.all.append(worker)
            worker.start(wait=False)
        return [worker.wait_ready() for worker in workers]

    def stop(self) -> None:
        for worker in self.all:
            worker.stop()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(cond: Callable[[], bool], timeout: float, what: str, every: float = 0.01) -> None:
    """Poll `cond` (from a synchronous test or benchmark) until it holds; fail after `timeout`."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not met within {timeout:g}s")
        time.sleep(every)


# --- the server side ----------------------------------------------------------------------------


def make_parents(url: str, n: int) -> list[str]:
    """`n` new parent sessions on the server."""
    with httpx.Client(base_url=url, timeout=30) as client:
        out = []
        for i in range(n):
            response = client.post("/session", json={"title": f"parent {i}"})
            response.raise_for_status()
            out.append(str(response.json()["id"]))
        return out


@dataclass
class NoticeCount:
    """What the parents received: each notice id with its task and how often it came."""

    by_notice: Counter[str] = field(default_factory=Counter)
    by_task: Counter[str] = field(default_factory=Counter)
    parent_of_task: dict[str, str] = field(default_factory=dict)

    @property
    def doubled(self) -> dict[str, int]:
        return {k: v for k, v in self.by_notice.items() if v > 1}


def count_notices(url: str, parents: Sequence[str], timeout: float = 60.0) -> NoticeCount:
    """Count the notice prompts (user messages) the parents received on the server at `url`."""
    out = NoticeCount()
    with httpx.Client(base_url=url, timeout=timeout) as client:
        for parent in parents:
            response = client.get(f"/session/{parent}/message")
            response.raise_for_status()
            for message in response.json():
                if (message.get("info") or {}).get("role") != "user":
                    continue
                for part in message.get("parts") or ():
                    if part.get("type") != "text":
                        continue
                    text = str(part.get("text", ""))
                    # a delivery holds one or more notices, each starting with its tag
                    tags = list(NOTICE_TAG.finditer(text))
                    for k, tag in enumerate(tags):
                        end = tags[k + 1].start() if k + 1 < len(tags) else len(text)
                        out.by_notice[tag.group(1)] += 1
                        names = NOTICE_TASK.findall(text[tag.start() : end])
                        assert names, f"notice {tag.group(1)} names no task: {text[:300]!r}"
                        out.by_task[names[0]] += 1
                        out.parent_of_task[names[0]] = parent
    return out


def session_exists(url: str, session_id: str) -> bool:
    """GET /session/{id}: 200 is True, OpenCode's NotFoundError 404 is False."""
    response = httpx.get(f"{url}/session/{session_id}", timeout=30)
    if response.status_code == 404:
        return False
    response.raise_for_status()
    return True


# --- the store side -----------------------------------------------------------------------------


def quick_options(lease_ttl: float) -> tuple[str, ...]:
    """Worker options of the fault tests: a short lease, quick polls and notice retries."""
    return (
        "--lease-ttl", str(lease_ttl), "--poll-interval", "1", "--notice-interval", "0.3",
        "--notice-claim-ttl", "5", "--notice-retry-initial", "0.2", "--stats-interval", "1",
    )  # fmt: skip


def store_args(kind: str, where: str) -> list[str]:
    return ["--sqlite", where] if kind == "sqlite" else ["--postgres", where]


@contextlib.asynccontextmanager
async def open_store(kind: str, where: str) -> AsyncIterator[TaskStore]:
    """The store the workers share, opened in the test process to read it back."""
    if kind == "sqlite":
        store: TaskStore = SQLiteTaskStore(where)
    else:
        from asyncagents.tasks.store import PostgresTaskStore

        store = PostgresTaskStore(where, max_size=2)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def create_store(kind: str, where: str) -> str:
    """Open and close the store once, so its schema exists before the workers start; returns
    `where`. (`SQLiteTaskStore.open` of several processes racing on a NEW file can fail with
    "database is locked" or refuse the half-made file as not ours: about 1 start in 10 of 4-8
    processes on this machine; that is the store's to fix, not what these tests are about.)"""

    async def once() -> None:
        async with open_store(kind, where):
            pass

    asyncio.run(once())
    return where


async def tasks_by_id(store: TaskStore) -> dict[str, Task]:
    return {t.id: t for t in await store.list_tasks()}


def all_ids(workers: Sequence[WorkerProcess]) -> list[str]:
    """Every task id the workers reported launched (and fail on any failed launch)."""
    ids: list[str] = []
    for worker in workers:
        for line in worker.of("launched"):
            assert line["errors"] == [], f"launches failed in {worker.pid}: {line['errors'][:5]}"
            ids.extend(line["task_ids"])
    return ids
