"""Fixtures of the service tests: a manager over the in-process backend, and the app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from asyncagents.service import create_app
from asyncagents.tasks import TaskManager
from inprocess_fixtures import backend, manager, parent, script, store
from service_support import TOKEN

__all__ = ["backend", "client", "manager", "parent", "script", "store"]


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
