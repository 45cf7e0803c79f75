"""Fixtures of a `TaskManager` over the in-process backend, shared by the task and service tests.

A conftest uses them by importing them (pytest registers the fixtures a conftest names).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStore,
)
from tasks_script import Script

__all__ = ["backend", "manager", "parent", "script", "store"]

#: quick loops for the in-process backend; notices as noReply (no wake turn to wait for); caps
#: no test of these fixtures reaches (the queue's own tests set theirs)
CONFIG = TaskManagerConfig(
    poll_interval=0.2, notice_retry_initial=0.05, wake="never", max_running=100
)


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def backend(script: Script) -> InProcessBackend:
    return InProcessBackend(script)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    made: TaskStore = (
        InMemoryTaskStore()
        if request.param == "memory"
        else SQLiteTaskStore(tmp_path / "tasks.sqlite3")
    )
    yield made
    await made.close()


@pytest.fixture
async def manager(backend: InProcessBackend, store: TaskStore) -> AsyncIterator[TaskManager]:
    async with TaskManager(backend, store, CONFIG) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 5)
        yield mgr


@pytest.fixture
async def parent(backend: InProcessBackend) -> str:
    session = await backend.create_session(title="parent")
    return str(session["id"])
