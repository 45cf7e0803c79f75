"""Fixtures for the manager's own logic: an in-process backend with a scriptable responder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    InProcessTurn,
    ProviderError,
    SQLiteTaskStore,
    TaskManager,
    TaskStore,
)


class Script:
    """Replies by tags in the prompt, like the e2e fake model: [tool], [fail], [hold], [sleep]."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[InProcessTurn] = []

    async def __call__(self, turn: InProcessTurn) -> str:
        self.seen.append(turn)
        if "[tool]" in turn.prompt:
            await turn.tool("bash", {"command": "echo hi"}, "hi")
        if "[fail]" in turn.prompt:
            raise ProviderError("Invalid request: rejected by the provider")
        if "[hold]" in turn.prompt:
            await self.release.wait()
        if "[sleep]" in turn.prompt:
            await asyncio.sleep(0.05)
        return "Reply to: " + turn.prompt


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def backend(script: Script) -> InProcessBackend:
    return InProcessBackend(script)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> TaskStore:
    if request.param == "memory":
        return InMemoryTaskStore()
    return SQLiteTaskStore(tmp_path / "tasks.sqlite3")


@pytest.fixture
async def manager(backend: InProcessBackend, store: TaskStore) -> AsyncIterator[TaskManager]:
    async with TaskManager(backend, store, poll_interval=0.2, notice_retry_initial=0.05) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 5)
        yield mgr


@pytest.fixture
async def parent(backend: InProcessBackend) -> str:
    session = await backend.create_session(title="parent")
    return str(session["id"])
