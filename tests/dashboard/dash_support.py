"""Shared parts of the dashboard tests: a scripted responder, a fake change source, a live
service on 127.0.0.1 (uvicorn in a thread, its own loop) and Debian's Chromium."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from asyncagents.service import begin_drain, create_app
from asyncagents.service.event_stream import ChangeListener
from asyncagents.service.server import uvicorn_config
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    InProcessTurn,
    ProviderError,
    Task,
    TaskManager,
    TaskManagerConfig,
)

TOKEN = "test-token-0123456789"
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T = TypeVar("T")


class Script:
    """Replies by tags in the prompt: ``[tool]`` one bash step first, ``[hold:NAME]`` wait for
    `release(NAME)`, ``[fail]`` a provider error, ``[429]`` a rate limit on the first try."""

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    def release(self, name: str) -> None:
        self.gate(name).set()

    async def __call__(self, turn: InProcessTurn) -> str:
        if "[tool]" in turn.prompt:
            await turn.tool("bash", {"command": "ls"}, "README.md")
            await turn.tool("read", {"filePath": "README.md"}, "# asyncagents")
        for name in re.findall(r"\[hold:(\w+)\]", turn.prompt):
            await self.gate(name).wait()
        if "[429]" in turn.prompt and not any(
            m["info"]["role"] == "assistant" and m["info"].get("error") for m in turn.history
        ):
            raise ProviderError("Rate limited: slow down", 429)
        if "[fail]" in turn.prompt:
            raise ProviderError("Invalid request: rejected by the provider")
        return "Done: " + turn.prompt


@dataclass
class FakeChange:
    """A `TaskChange` as the manager reports it."""

    kind: str
    task: Task


@dataclass
class FakeSource:
    """A change source for hub tests: `emit` calls the listeners like the manager does."""

    listeners: list[ChangeListener] = field(default_factory=list)

    def add_listener(self, callback: ChangeListener) -> None:
        self.listeners.append(callback)

    def remove_listener(self, callback: ChangeListener) -> None:
        self.listeners.remove(callback)

    def emit(self, kind: str, task: Task) -> None:
        for listener in list(self.listeners):
            listener(FakeChange(kind, task))


def make_task(n: int, **fields: Any) -> Task:
    base: dict[str, Any] = {
        "id": f"tsk_{n:04d}",
        "parent_session_id": "ses_parent",
        "session_id": f"ses_child{n:04d}",
        "prompt": f"prompt {n}",
        "agent": "general",
        "description": f"task {n}",
        "created_at": 1_700_000_000_000 + n,
        "updated_at": 1_700_000_000_000 + n,
    }
    base.update(fields)
    return Task(**base)


class LiveService:
    """The task API and page served by uvicorn on 127.0.0.1 in a thread with its own loop,
    over a real `TaskManager` on an `InProcessBackend`. `call` runs a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.script = Script()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self.port = 0
        self.thread = threading.Thread(target=self._run, name="dashboard-live", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveService:
        self.thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the live service did not start: {self._error!r}")
        return self

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self.backend = InProcessBackend(self.script)
        self.manager = TaskManager(
            self.backend,
            InMemoryTaskStore(),
            TaskManagerConfig(poll_interval=0.2, notice_retry_initial=0.05, wake="never"),
        )
        await self.manager.start()
        self.app = create_app(self.manager, token=TOKEN, manage_manager=False)
        # configured as `asyncagents serve` runs it (its protocol can reset a connection)
        config = uvicorn_config(self.app, "127.0.0.1", 0, lifespan="off")
        self.server = uvicorn.Server(config)
        serving = asyncio.ensure_future(self.server.serve())
        while not self.server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        parent = await self.backend.create_session(title="parent")
        self.parent = str(parent["id"])
        self._ready.set()
        try:
            await serving
        finally:
            await self.manager.close()
            await self.backend.aclose()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def run(self, fn: Callable[[], T], timeout: float = 30) -> T:
        """Run a plain function on the service's loop (e.g. `script.release`)."""

        async def wrapper() -> T:
            return fn()

        return self.call(wrapper(), timeout)

    def stop(self) -> None:
        if not self.thread.is_alive():
            return

        def shut() -> None:
            begin_drain(self.app)  # the event streams end
            self.server.should_exit = True

        self.loop.call_soon_threadsafe(shut)
        self.thread.join(30)


def ensure_chromium() -> str:
    """Debian's Chromium at /usr/bin/chromium, installed with apt-get when missing (as CI does,
    running as root). Never skips: a missing browser is a failure that says what to do."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(
            f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get): "
            "run `apt-get install -y chromium` as root"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {(done.stdout + done.stderr)[-2000:]}")
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


def artifacts_dir() -> Path:
    """Where screenshots go: ``$ASYNCAGENTS_TEST_ARTIFACTS`` or ``tests/artifacts`` (ignored)."""
    path = Path(os.environ.get("ASYNCAGENTS_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
