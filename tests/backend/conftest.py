"""Fixtures of the backend fault tests: a fake OpenCode server and a backend talking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from asyncagents.tasks import OpenCodeBackend
from fake_opencode import FakeOpenCode


@pytest.fixture
def server() -> Iterator[FakeOpenCode]:
    with FakeOpenCode(heartbeat=0.5) as fake:
        yield fake


@pytest.fixture
async def backend(server: FakeOpenCode) -> AsyncIterator[OpenCodeBackend]:
    async with OpenCodeBackend(server.url, timeout=3.0, event_idle_timeout=5) as client:
        yield client


@pytest.fixture
async def session_id(backend: OpenCodeBackend) -> str:
    return str((await backend.create_session(title="faults"))["id"])
