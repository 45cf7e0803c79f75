"""Fixtures of the service tests: a manager over the in-process backend, and the app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from asyncagents.service import create_app
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStore,
)
from service_support import TOKEN, Responder


@pytest.fixture
def responder() -> Responder:
    return Responder()


@pytest.fixture
def backend(responder: Responder) -> InProcessBackend:
    return InProcessBackend(responder)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    made: TaskStore = (
        InMemoryTaskStore()
        if request.param == "memory"
        else SQLiteTaskStore(tmp_path / "tasks.sqlite3")
    )
    yield made
    await made.close()


#: quick loops for the in-process backend; notices as noReply (no wake turn to wait for)
CONFIG = TaskManagerConfig(poll_interval=0.2, notice_retry_initial=0.05, wake="never")


@pytest.fixture
async def manager(backend: InProcessBackend, store: TaskStore) -> AsyncIterator[TaskManager]:
    async with TaskManager(backend, store, CONFIG) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 5)
        yield mgr


@pytest.fixture
async def parent(backend: InProcessBackend) -> str:
    session = await backend.create_session(title="parent")
    return str(session["id"])


@pytest.fixture
async def client(manager: TaskManager) -> AsyncIterator[httpx.AsyncClient]:
    """The app over `manager` (started by its fixture), authorised with `TOKEN`."""
    app = create_app(manager, token=TOKEN, manage_manager=False, max_body_bytes=64 * 1024)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://service",
        headers={"authorization": f"Bearer {TOKEN}"},
    ) as http:
        yield http
