"""Fixtures of the multi-process tests: a fake OpenCode server in its own process, and the
shared store (a SQLite file, or a database of a throwaway PostgreSQL server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_opencode import FakeOpenCodeProcess
from pg_server import PostgresServer, running_postgres
from workers_support import create_store

STORES = ["sqlite", "postgres"]


@pytest.fixture
def fake_server() -> Iterator[FakeOpenCodeProcess]:
    """A fake ``opencode serve`` in its own process (stopped by PID at the end)."""
    with FakeOpenCodeProcess(heartbeat=2.0) as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One server for the session; each test gets its own database."""
    with running_postgres() as server:
        yield server


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def store_where(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the workers' shared store is: a SQLite path or a new database's DSN, with the
    schema created (see `create_store`)."""
    if store_kind == "sqlite":
        return create_store("sqlite", str(tmp_path / "tasks.sqlite3"))
    server: PostgresServer = request.getfixturevalue("postgres")
    return create_store("postgres", server.create_database())
