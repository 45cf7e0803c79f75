"""Fixtures of the multi-process manager tests: worker processes (workers.py), a fake OpenCode
server in its own process, and a real PostgreSQL (tests/pg_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_opencode import FakeOpenCodeProcess
from pg_server import PostgresServer, running_postgres
from workers import Worker, create_store


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
        spec = f"sqlite:{tmp_path / 'tasks.sqlite3'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        spec = f"postgres:{server.create_database()}"
    asyncio.run(create_store(spec))
    return spec
