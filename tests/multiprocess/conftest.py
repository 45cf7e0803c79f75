"""Fixtures of the multi-process manager tests: worker processes, a fake OpenCode server in its
own process, a real PostgreSQL (tests/pg_server.py), and the checks every test makes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncagents.tasks import OpenCodeBackend, SQLiteTaskStore, Task, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore
from fake_opencode import FakeOpenCodeProcess
from parent_notices import notices_in
from pg_server import PostgresServer, running_postgres

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("task_worker.py")
_TASK_IN_NOTICE = re.compile(r"^\[asyncagents notice \S+\]\nBackground task (tsk_\w+)", re.M)


class Worker:
    """One `task_worker.py` process; `launched` holds the ids it printed."""

    def __init__(self, url: str, store: str, instance_id: str, **options: object) -> None:
        self.instance_id = instance_id
        args = [sys.executable, str(WORKER), "--url", url, "--store", store]
        args += ["--instance-id", instance_id]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        env = dict(os.environ)
        paths = [str(REPO / "python"), str(REPO / "tests")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        self.process = subprocess.Popen(
            args, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        self.launched: list[str] = []

    def wait_launched(self, timeout: float = 120.0) -> list[str]:
        """Block until the worker printed the ids of the tasks it launched."""
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.append(
                self.process.stdout.readline() if self.process.stdout else ""
            )
        )
        reader.start()
        reader.join(timeout)
        if not lines or not lines[0].strip():
            raise AssertionError(
                f"worker {self.instance_id} did not launch (exit {self.process.poll()})"
            )
        self.launched = list(json.loads(lines[0])["launched"])
        return self.launched

    def kill(self) -> None:
        """kill -9: no clean-up at all, its lease stays until it expires."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM: a graceful close (lease dropped); the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return int(self.process.returncode)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Every worker a test starts; stopped by PID at the end, whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenCodeProcess]:
    with FakeOpenCodeProcess(heartbeat=2.0) as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """``sqlite:<new file>`` or ``postgres:<new database>``, for the workers and the checks."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'tasks.sqlite3'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return f"postgres:{server.create_database()}"


def open_store(spec: str) -> TaskStore:
    kind, _, target = spec.partition(":")
    return SQLiteTaskStore(target) if kind == "sqlite" else PostgresTaskStore(target, max_size=2)


async def notice_counts(backend: OpenCodeBackend, parents: list[str]) -> Counter[str]:
    """How many notices each task id got, over all the parents' deliveries."""
    counts: Counter[str] = Counter()
    for parent in parents:
        for notice in await notices_in(backend, parent):
            counts.update(_TASK_IN_NOTICE.findall(notice))
    return counts


async def all_ended(store: TaskStore, ids: list[str]) -> bool:
    tasks = await store.list_tasks()
    ended = {t.id for t in tasks if not t.status.active}
    return all(i in ended for i in ids)


async def tasks_by_id(store: TaskStore) -> dict[str, Task]:
    return {t.id: t for t in await store.list_tasks()}
