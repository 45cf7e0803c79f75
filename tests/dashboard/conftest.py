"""Fixtures for the task API: a real `TaskManager` on an `InProcessBackend`, served through
the ASGI transport (no socket)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from asyncagents.service import begin_drain, create_app
from asyncagents.tasks import InMemoryTaskStore, InProcessBackend, TaskManager
from dash_support import TOKEN, Script
from inprocess_fixtures import CONFIG, parent
from starlette.applications import Starlette

__all__ = ["parent"]  # a fixture shared with the task tests


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def backend(script: Script) -> InProcessBackend:
    return InProcessBackend(script)


@pytest.fixture
async def manager(backend: InProcessBackend) -> AsyncIterator[TaskManager]:
    async with TaskManager(backend, InMemoryTaskStore(), CONFIG) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 5)
        yield mgr


@pytest.fixture
def app(manager: TaskManager) -> Starlette:
    """The service's own app (its token middleware, its error handlers) with the dashboard."""
    return create_app(manager, token=TOKEN, manage_manager=False)


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://dash.test", headers=headers
    ) as http:
        yield http
    begin_drain(app)
