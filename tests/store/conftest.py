"""Fixtures of the store tests: one suite, run on every store (memory, SQLite, PostgreSQL).

PostgreSQL is a real server from Debian's packages (see ``tests/pg_server.py``), started once per
session; each test gets its own new database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from asyncagents.tasks.store import InMemoryTaskStore, SQLiteTaskStore, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore
from pg_server import PostgresServer, running_postgres

#: a new handle on the test's one store (its own connection or pool; the same dict for memory)
OpenStore = Callable[[], Awaitable[TaskStore]]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def pg_dsn(postgres: PostgresServer) -> str:
    """The DSN of a new, empty database of the session's server."""
    return postgres.create_database()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def open_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[OpenStore]:
    """Opens handles on one store of this test's kind; every handle is closed at the end."""
    shared = InMemoryTaskStore()
    dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else ""
    opened: list[TaskStore] = []

    async def new() -> TaskStore:
        store: TaskStore
        if kind == "memory":
            store = shared
        elif kind == "sqlite":
            store = SQLiteTaskStore(tmp_path / "tasks.db")
        else:
            store = PostgresTaskStore(dsn, max_size=4)
        await store.open()
        opened.append(store)
        return store

    yield new
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> TaskStore:
    return await open_store()
