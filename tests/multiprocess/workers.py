"""Worker processes of the multi-process manager tests and benchmarks, and their checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from asyncagents.tasks import OpenCodeBackend, SQLiteTaskStore, Task, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore
from parent_notices import notices_in

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("task_worker.py")
_TASK_IN_NOTICE = re.compile(r"^\[asyncagents notice \S+\]\nBackground task (tsk_\w+)", re.M)


class Worker:
    """One `task_worker.py` process; `launched` holds the ids it printed."""

    def __init__(
        self, url: str, store: str, instance_id: str, *, wait_go: bool = False, **options: object
    ) -> None:
        self.instance_id = instance_id
        args = [sys.executable, str(WORKER), "--url", url, "--store", store]
        args += ["--instance-id", instance_id] + (["--wait-go"] if wait_go else [])
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        env = dict(os.environ)
        paths = [str(REPO / "python"), str(REPO / "tests")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        self.process = subprocess.Popen(
            args,
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE if wait_go else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.launched: list[str] = []

    def _line(self, timeout: float) -> str:
        lines: list[str] = []
        stdout = self.process.stdout
        reader = threading.Thread(
            target=lambda: lines.append(stdout.readline() if stdout else ""), daemon=True
        )
        reader.start()
        reader.join(timeout)
        if not lines or not lines[0].strip():
            code = self.process.poll()
            raise AssertionError(f"worker {self.instance_id} said nothing (exit status {code})")
        return lines[0]

    def wait_ready(self, timeout: float = 120.0) -> None:
        """With `wait_go`: block until the worker's manager has started."""
        assert self._line(timeout).strip() == "ready"

    def go(self) -> None:
        """With `wait_go`: let the worker launch its tasks now."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def wait_launched(self, timeout: float = 120.0) -> list[str]:
        """Block until the worker printed the ids of the tasks it launched."""
        self.launched = list(json.loads(self._line(timeout))["launched"])
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
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        return int(self.process.returncode)


def open_store(spec: str) -> TaskStore:
    kind, _, target = spec.partition(":")
    return SQLiteTaskStore(target) if kind == "sqlite" else PostgresTaskStore(target, max_size=2)


async def create_store(spec: str) -> None:
    """Create the store's schema before the workers start.

    Workaround: `SQLiteTaskStore.open` run by several processes at once on a new file can
    refuse it as "not an asyncagents task store" (its first, unlocked check reads
    ``application_id`` and ``user_version`` in two statements, and another process may commit
    the schema in between); reported to the store's owner.
    """
    store = open_store(spec)
    await store.open()
    await store.close()


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
