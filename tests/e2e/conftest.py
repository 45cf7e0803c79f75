"""Fixtures of the end-to-end tests: one ``opencode serve`` and one fake model per session.

Each test makes its own parent sessions, so sharing the server does not couple tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from asyncagents.tasks import InMemoryTaskStore, OpenCodeBackend, TaskManager, TaskManagerConfig
from e2e_support import OpenCodeServer, running_server
from fake_model import FakeModel


@pytest.fixture(scope="session")
def fake_model() -> Iterator[FakeModel]:
    model = FakeModel().start()
    yield model
    model.stop()


@pytest.fixture(scope="session")
def opencode(
    fake_model: FakeModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenCodeServer]:
    """The shared server: every test makes its own sessions, so they do not interfere."""
    with running_server(fake_model, tmp_path_factory.mktemp("opencode")) as server:
        yield server


@pytest.fixture
async def backend(opencode: OpenCodeServer) -> AsyncIterator[OpenCodeBackend]:
    async with OpenCodeBackend(opencode.base_url) as client:
        yield client


#: long enough that no test passes on the periodic reconciliation alone: completions must come
#: from OpenCode's events (and the one check after each prompt is accepted)
POLL_INTERVAL = 30.0


@pytest.fixture
async def manager(backend: OpenCodeBackend) -> AsyncIterator[TaskManager]:
    async with TaskManager(
        backend,
        InMemoryTaskStore(),
        TaskManagerConfig(poll_interval=POLL_INTERVAL, notice_retry_initial=0.2, wake="never"),
    ) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 30)
        yield mgr


@pytest.fixture
async def parent(backend: OpenCodeBackend) -> str:
    session = await backend.create_session(title="e2e parent")
    return str(session["id"])
