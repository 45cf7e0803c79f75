"""PostgreSQL-only behaviour: our own schema, refusal of a foreign one, errors naming the DSN
without its password, concurrent first opens, and rows that do not load."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import psycopg
import pytest
from asyncagents.tasks import StoreError
from asyncagents.tasks.store.postgres import SCHEMA_VERSION, PostgresTaskStore, redact_dsn
from pg_server import running_postgres
from store_records import make_notice, make_task


def relations(dsn: str, schema: str) -> dict[str, list[tuple[object, ...]]]:
    """Every table of `schema` with all its rows."""
    with psycopg.connect(dsn) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
                (schema,),
            )
        ]
        return {
            name: sorted(conn.execute(f'SELECT * FROM "{schema}"."{name}"').fetchall(), key=repr)
            for name in names
        }


async def test_open_creates_our_schema_once_and_reopens_it(pg_dsn: str) -> None:
    store = PostgresTaskStore(pg_dsn)
    await store.open()
    await store.insert(make_task("tsk_1"))
    await store.close()
    again = PostgresTaskStore(pg_dsn)
    assert [t.id for t in await again.list_tasks()] == ["tsk_1"]  # first call opens it
    await again.close()
    tables = relations(pg_dsn, "asyncagents")
    assert sorted(tables) == [
        "asyncagents_meta",
        "cleared",
        "leases",
        "notices",
        "queue_turns",
        "task_counts",
        "task_models",
        "task_tools",
        "tasks",
        "tool_totals",
        "usage_totals",
    ]
    assert tables["asyncagents_meta"] == [("asyncagents-tasks", SCHEMA_VERSION)]


#: version 1 of our schema (before the admission queue), verbatim
_V1_SCHEMA = (
    "CREATE TABLE asyncagents_meta (application TEXT NOT NULL, version INTEGER NOT NULL)",
    'CREATE TABLE tasks (id TEXT COLLATE "C" PRIMARY KEY, parent_session_id TEXT NOT NULL, '
    "session_id TEXT, status TEXT NOT NULL, created_at BIGINT NOT NULL, data TEXT NOT NULL, "
    "backend TEXT NOT NULL DEFAULT '', owner TEXT)",
    "CREATE INDEX tasks_parent ON tasks (parent_session_id, created_at)",
    "CREATE INDEX tasks_session ON tasks (session_id)",
    "CREATE INDEX tasks_backend_status ON tasks (backend, status, created_at)",
    "CREATE INDEX tasks_owner ON tasks (owner)",
    'CREATE TABLE notices (id TEXT COLLATE "C" PRIMARY KEY, parent_session_id TEXT NOT NULL, '
    "created_at BIGINT NOT NULL, data TEXT NOT NULL, backend TEXT NOT NULL DEFAULT '', "
    "claimed_by TEXT, claim_expires_at BIGINT, next_attempt_at BIGINT NOT NULL DEFAULT 0)",
    "CREATE INDEX notices_parent ON notices (parent_session_id, created_at)",
    "CREATE INDEX notices_claim ON notices (backend, next_attempt_at, created_at)",
    "CREATE TABLE leases (owner TEXT PRIMARY KEY, backend TEXT NOT NULL, "
    "expires_at BIGINT NOT NULL)",
)


async def test_a_version_1_schema_is_migrated_and_its_running_tasks_count_under_the_caps(
    pg_dsn: str,
) -> None:
    running = make_task("tsk_run", backend="b1")
    running.agent = "build"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA asyncagents")
        conn.execute("SET search_path = asyncagents")
        for statement in _V1_SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO asyncagents_meta VALUES ('asyncagents-tasks', 1)")
        conn.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
            "backend, owner) VALUES (%s, %s, NULL, 'running', %s, %s, 'b1', NULL)",
            (running.id, running.parent_session_id, running.created_at,
             running.model_dump_json()),
        )  # fmt: skip
        conn.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
            "backend, owner) VALUES ('tsk_broken', 'ses_p', NULL, 'running', 1, '{not json', "
            "'b1', NULL)"
        )
    store = PostgresTaskStore(pg_dsn)
    await store.open()
    assert [t.id for t in await store.list_tasks()] == [running.id]
    view = await store.queue_view("b1")
    assert {(e.id, e.agent, e.running) for e in view.entries} == {
        ("tsk_run", "build", True),
        ("tsk_broken", "", True),
    }
    await store.close()
    tables = relations(pg_dsn, "asyncagents")
    assert "queue_turns" in tables
    assert tables["asyncagents_meta"] == [("asyncagents-tasks", SCHEMA_VERSION)]


@pytest.mark.parametrize("kind", ["unrelated_table", "other_meta", "newer_version"])
async def test_a_schema_that_is_not_ours_is_refused_and_left_unmodified(
    pg_dsn: str, kind: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA asyncagents")
        if kind == "unrelated_table":
            conn.execute("CREATE TABLE asyncagents.tasks (id int, title text)")
            conn.execute("INSERT INTO asyncagents.tasks VALUES (1, 'theirs')")
        elif kind == "other_meta":
            conn.execute(
                "CREATE TABLE asyncagents.asyncagents_meta (application text, version int)"
            )
            conn.execute("INSERT INTO asyncagents.asyncagents_meta VALUES ('someone-else', 1)")
        else:
            conn.execute(
                "CREATE TABLE asyncagents.asyncagents_meta (application text, version int)"
            )
            conn.execute(
                "INSERT INTO asyncagents.asyncagents_meta VALUES ('asyncagents-tasks', %s)",
                (SCHEMA_VERSION + 1,),
            )
    before = relations(pg_dsn, "asyncagents")
    store = PostgresTaskStore(pg_dsn)
    with pytest.raises(StoreError) as err:
        await store.open()
    message = str(err.value)
    assert redact_dsn(pg_dsn) in message
    if kind == "newer_version":
        assert f"version {SCHEMA_VERSION + 1}, newer than" in message
    else:
        assert "not an asyncagents task store" in message
        assert "left untouched" in message
    assert relations(pg_dsn, "asyncagents") == before
    # another schema of the same database is fine
    elsewhere = PostgresTaskStore(pg_dsn, schema="asyncagents_2")
    await elsewhere.insert(make_task("tsk_1"))
    await elsewhere.close()


async def test_errors_name_the_dsn_without_its_password() -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://tasks:s3cret-pw@127.0.0.1:{port}/agents?connect_timeout=3"
    store = PostgresTaskStore(dsn, connect_timeout=3)
    with pytest.raises(StoreError) as err:
        await store.insert(make_task())
    message = str(err.value)
    assert "s3cret-pw" not in message
    assert f"port={port}" in message and "user=tasks" in message and "dbname=agents" in message
    assert "connecting failed" in message
    assert redact_dsn(dsn) == (
        f"user=tasks connect_timeout=3 dbname=agents host=127.0.0.1 port={port}"
    )
    assert message.startswith(f"PostgreSQL task store {redact_dsn(dsn)!r} (schema asyncagents)")


def test_a_schema_name_that_is_not_a_plain_identifier_is_refused() -> None:
    with pytest.raises(ValueError, match="schema must be a lower-case SQL identifier"):
        PostgresTaskStore("dbname=x", schema='x"; DROP TABLE y; --')


async def test_concurrent_first_opens_of_one_new_database_all_succeed(pg_dsn: str) -> None:
    stores = [PostgresTaskStore(pg_dsn, max_size=2) for _ in range(5)]
    await asyncio.gather(*(s.open() for s in stores))
    await stores[0].insert(make_task("tsk_1"))
    assert [[t.id for t in await s.list_tasks()] for s in stores] == [["tsk_1"]] * 5
    for s in stores:
        await s.close()


async def test_rows_that_do_not_load_are_skipped_with_a_warning(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresTaskStore(pg_dsn)
    good = make_task("tsk_good", owner="dead", session_id="ses_x", created_at=1)
    await store.insert(good)
    good_notice = make_notice(good, created_at=1)
    await store.update(good.id, lambda t: (t, good_notice))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for task_id, data in (("tsk_junk", "{not json"), ("tsk_types", '{"id": 5, "turn": "x"}')):
            conn.execute(
                "INSERT INTO asyncagents.tasks (id, parent_session_id, session_id, status, "
                "created_at, data, backend, owner) "
                "VALUES (%s, 'ses_parent', 'ses_x', 'running', 9, %s, 'b1', 'dead')",
                (task_id, data),
            )
        conn.execute(
            "INSERT INTO asyncagents.notices (id, parent_session_id, created_at, data, backend) "
            "VALUES ('ntc_junk', 'ses_parent', 0, '[]', 'b1')"
        )
    with caplog.at_level(logging.WARNING, logger="asyncagents.tasks.store"):
        assert await store.list_tasks() == [good]
        assert await store.get("tsk_junk") is None
        assert await store.update("tsk_types", lambda t: (t, None)) is None
        assert await store.find_by_session("ses_x") is None
        assert await store.notices() == [good_notice]
        assert [t.id for t in await store.take_over("m1", "b1")] == [good.id]
        assert [n.id for n in await store.claim_notices("m1", "b1", 60)] == [good_notice.id]
        assert [t.id for t in await store.delete_parent("ses_parent")] == [good.id]
    assert await store.ids_with_prefix("tsk_") == []
    warned = " ".join(r.getMessage() for r in caplog.records)
    for row_id in ("tsk_junk", "tsk_types", "ntc_junk"):
        assert row_id in warned
    await store.close()


async def test_a_50_mb_prompt_round_trips(pg_dsn: str) -> None:
    store = PostgresTaskStore(pg_dsn)
    task = make_task("tsk_big")
    task.prompt = "é" * 25_000_000 + "x" * 25_000_000
    await store.insert(task)
    assert await store.get(task.id) == task
    await store.close()


async def test_a_server_that_goes_away_raises_store_error_and_the_store_recovers() -> None:
    """Its own server: this test stops it. Nothing stored before is lost across the restart."""
    with running_postgres() as server:
        dsn = server.create_database()
        store = PostgresTaskStore(dsn, timeout=3, connect_timeout=2)
        await store.insert(make_task("tsk_before"))
        server.kill()
        with pytest.raises(StoreError) as err:
            await store.insert(make_task("tsk_during"))
        assert redact_dsn(dsn) in str(err.value)
        assert "inserting task tsk_during failed" in str(err.value)
        server.restart()
        # the pool reconnects with backoff: the same store works again within its own retries
        deadline = time.monotonic() + 60
        while True:
            try:
                await store.insert(make_task("tsk_after"))
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        assert [t.id for t in await store.list_tasks()] == ["tsk_after", "tsk_before"]
        await store.close()


async def test_a_version_1_schema_gets_the_query_columns_from_its_rows(pg_dsn: str) -> None:
    """Version 1 -> 3 in place (through the admission queue's 2): the derived columns, tool rows
    and search index are filled from each row's JSON, in the open's transaction."""
    from asyncagents.tasks.models import TaskProgress, TaskStatus
    from asyncagents.tasks.queries import TaskQuery
    from asyncagents.tasks.store.postgres import _SCHEMA

    done = make_task("tsk_done", status=TaskStatus.COMPLETED, created_at=1_000)
    done.agent, done.result = "explore", "Found IT"
    done.completed_at, done.updated_at = 1_250, 1_300
    done.progress = TaskProgress(tool_calls=3, tools={"grep": 2, "read": 1})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA asyncagents")
        conn.execute("SET search_path = asyncagents")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO asyncagents_meta VALUES ('asyncagents-tasks', 1)")
        conn.execute(
            "INSERT INTO tasks (id, parent_session_id, status, created_at, data, backend) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (done.id, done.parent_session_id, "completed", 1_000, done.model_dump_json(), "b1"),
        )
    store = PostgresTaskStore(pg_dsn)
    page = await store.query_tasks(TaskQuery(backend="b1", text="found it"))
    assert page.tasks == [done] and page.total == 1
    stats = await store.task_stats("b1")
    assert stats.by_agent == {"explore": 1}
    assert stats.tool_calls == {"grep": 2, "read": 1}
    assert stats.durations.max_ms == 250
    await store.close()
    assert relations(pg_dsn, "asyncagents")["asyncagents_meta"] == [
        ("asyncagents-tasks", SCHEMA_VERSION)
    ]
    with psycopg.connect(pg_dsn) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert "tasks_search" in indexes  # pg_trgm is installed on the test server


async def test_a_version_2_schema_gets_the_query_columns_and_totals_and_keeps_its_queue(
    pg_dsn: str,
) -> None:
    """Version 2 (the admission queue) -> 3: the queries' columns, the usage by model and the
    running totals come from each row's JSON; queued tasks are counted and stay queued."""
    from asyncagents.tasks.models import TaskStatus, TaskUsage
    from asyncagents.tasks.queries import TaskQuery, UsageSums
    from asyncagents.tasks.store.postgres import _MIGRATE_1_TO_2, _SCHEMA

    used = TaskUsage(input_tokens=7, output_tokens=3, cost=0.25)
    done = make_task("tsk_done", parent="ses_top", status=TaskStatus.COMPLETED, created_at=1_000)
    done.agent, done.result, done.completed_at, done.updated_at = (
        "explore",
        "Found IT",
        1_200,
        1_300,
    )
    done.usage, done.usage_by_model = used, {"prov/m1": used}
    waiting = make_task("tsk_wait", parent="ses_kid", status=TaskStatus.QUEUED, created_at=2_000)
    waiting.root_session_id, waiting.depth, waiting.model = "ses_top", 2, "prov/m2"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA asyncagents")
        conn.execute("SET search_path = asyncagents")
        for statement in (*_SCHEMA, *_MIGRATE_1_TO_2):
            conn.execute(statement)
        conn.execute("INSERT INTO asyncagents_meta VALUES ('asyncagents-tasks', 2)")
        for t in (done, waiting):
            conn.execute(
                "INSERT INTO tasks (id, parent_session_id, status, created_at, data, backend, "
                "agent, model) VALUES (%s, %s, %s, %s, %s, 'b1', %s, %s)",
                (t.id, t.parent_session_id, t.status.value, t.created_at, t.model_dump_json(),
                 t.agent, t.model),
            )  # fmt: skip
        conn.execute(
            "INSERT INTO tasks (id, parent_session_id, status, created_at, data, backend, agent) "
            "VALUES ('tsk_broken', 'ses_top', 'queued', 3000, '{not json', 'b1', 'build')"
        )
    store = PostgresTaskStore(pg_dsn)
    page = await store.query_tasks(TaskQuery(backend="b1", text="found it"))
    assert page.tasks == [done] and page.total == 1 and page.usage == used
    stats = await store.task_stats("b1")
    assert stats.tasks == 3 and stats.by_status["queued"] == 2
    assert stats.by_agent == {"build": 1, "explore": 1, "general": 1}
    assert stats.usage == UsageSums(
        total=used,
        by_agent={"build": TaskUsage(), "explore": used, "general": TaskUsage()},
        by_model={"prov/m1": used},
        by_parent={"ses_top": used, "ses_kid": TaskUsage()},
        by_tree={"ses_top": used},
        parents=2,
        trees=1,
    )
    view = await store.queue_view("b1")
    assert sorted((e.id, e.agent, e.model, e.running) for e in view.entries) == [
        ("tsk_broken", "build", None, False),
        ("tsk_wait", "general", "prov/m2", False),
    ]
    await store.close()
    tables = relations(pg_dsn, "asyncagents")
    assert (
        tables["asyncagents_meta"]
        == [("asyncagents-tasks", SCHEMA_VERSION)]
        == [("asyncagents-tasks", 3)]
    )


async def test_a_schema_without_the_queued_index_gets_it_on_open_and_keeps_its_version(
    pg_dsn: str,
) -> None:
    """The queued tasks' index (for a new task's place in its parent's queue) is made on open
    when a schema of this version lacks it; the version stays, the rows are untouched."""
    from asyncagents.tasks.models import TaskStatus

    store = PostgresTaskStore(pg_dsn)
    await store.open()
    queued = [make_task(f"tsk_q{i}", status=TaskStatus.QUEUED, created_at=i) for i in range(3)]
    for task in queued:
        await store.insert(task)
    await store.close()

    def indexes() -> set[str]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'asyncagents'"
            ).fetchall()
        return {str(r[0]) for r in rows}

    assert "tasks_queued" in indexes()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX asyncagents.tasks_queued")
    assert "tasks_queued" not in indexes()
    again = PostgresTaskStore(pg_dsn)
    await again.open()
    assert [await again.queued_ahead(t) for t in queued] == [0, 1, 2]
    await again.close()
    assert "tasks_queued" in indexes()
    assert relations(pg_dsn, "asyncagents")["asyncagents_meta"] == [
        ("asyncagents-tasks", SCHEMA_VERSION)
    ]
