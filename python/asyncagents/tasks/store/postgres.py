"""`PostgresTaskStore`: tasks, leases and notices in one PostgreSQL database, shared by many hosts.

Several hosts (and several worker processes on each) point at one database by giving the same DSN
(and `schema`): each runs its own managers, each manager with its own instance id and its
backend's name. Row locks make that safe: `update` reads the task ``FOR UPDATE`` and writes it in
the same transaction; `take_over` and `claim_notices` pick and mark their rows in one statement
with ``FOR UPDATE SKIP LOCKED``, so two managers never get the same task or notice, and neither
waits for the other. Lease and claim times come from the database server's clock (epoch
milliseconds), so hosts whose clocks disagree still agree on when a lease expired; a notice is
due when its ``next_attempt_at`` (set by the manager from its host's clock) is not after the
server's now.

The tables live in their own PostgreSQL schema (``asyncagents`` by default) with a version table
of ours (``asyncagents_meta``). `open` creates them in an empty (or missing) schema and refuses a
schema that holds anything else, without changing it. The connecting role needs ``CREATE`` on the
database the first time (to create the schema), then only read/write on its tables.

Example: ``PostgresTaskStore("postgresql://tasks@db.internal/agents", max_size=20)`` on every
host; keep the password out of the DSN with a ``~/.pgpass`` file or ``PGPASSWORD``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..admission import FRESH_MS, Caps, Entry, Include, admitted, choose, turn_keys
from ..errors import StoreError
from ..models import Notice, Task, TaskStatus, now_ms
from ..queries import (
    CLEARED_MEMORY_MS,
    TOP_DEFAULT,
    DurationSummary,
    TaskChanges,
    TaskPage,
    TaskQuery,
    TaskStats,
    duration_summary,
    has_nul,
    median_ranks,
    percentile_rank,
    stats_of,
)
from .base import PENDING_STATUSES, Mutation, QueueView, TaskCost
from .rows import (
    DERIVED_COLUMNS,
    INSERT_MODEL,
    KEY_COUNTS,
    PARENT_COUNTS,
    PARENT_USAGE,
    REBUILD_TOTALS,
    TASK_MODELS_TABLE,
    TOP_USAGE,
    TOTAL_COUNTS,
    TOTAL_USAGE,
    TOTALS_TABLES,
    USAGE_COLUMNS,
    Deltas,
    Footprint,
    count_query,
    counted_page,
    derived,
    like_pattern,
    load_notice,
    load_task,
    merged,
    removal_deltas,
    removed_deltas,
    seconds_to_ms,
    stats_from,
    total_deltas,
    total_statements,
)

log = logging.getLogger("asyncagents.tasks.store")

#: the row of ``asyncagents_meta`` that marks a schema as ours
APPLICATION = "asyncagents-tasks"
#: the schema version this code writes and reads (1: before the admission queue, 2: before the
#: queries' columns and running totals)
SCHEMA_VERSION = 3

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: "now" in epoch ms on the server, fixed for one statement
_NOW = "(extract(epoch from statement_timestamp()) * 1000)::bigint"
_V1_TABLES = frozenset({"asyncagents_meta", "tasks", "notices", "leases"})
_V2_TABLES = _V1_TABLES | {"queue_turns"}
_TABLES = _V2_TABLES | {
    "task_tools",
    "task_models",
    "cleared",
    "task_counts",
    "tool_totals",
    "usage_totals",
}
#: text columns sort by code point (``COLLATE "C"``), like Python and SQLite
_SCHEMA = (
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
#: version 1 -> 2: the admission queue. The columns admission counts by (copies of the task's
#: fields, written with every change), and each parent's last admission (round robin); a new
#: schema gets version 1 and this, so both paths end in the same layout
_MIGRATE_1_TO_2 = (
    "ALTER TABLE tasks ADD COLUMN agent TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN model TEXT",
    "ALTER TABLE tasks ADD COLUMN ready BOOLEAN NOT NULL DEFAULT TRUE",
    "CREATE TABLE queue_turns (backend TEXT NOT NULL, parent_session_id TEXT NOT NULL, "
    "admitted_at BIGINT NOT NULL, PRIMARY KEY (backend, parent_session_id))",
)

#: version 2 -> 3: the columns and indexes that let lists, searches, stats and change polls run
#: in SQL (filled from each row's JSON by `_fill_derived`; ``agent`` is version 2's column,
#: refilled), tool calls and usage by model, the running totals, cleared ids
_MIGRATE_2_TO_3 = (
    "ALTER TABLE tasks ADD COLUMN updated_at BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE tasks ADD COLUMN duration_ms BIGINT",
    "ALTER TABLE tasks ADD COLUMN search TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN tools_unrecorded INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tasks ADD COLUMN root_session_id TEXT NOT NULL DEFAULT ''",
    *(
        f"ALTER TABLE tasks ADD COLUMN {c} "
        f"{'DOUBLE PRECISION' if c == 'cost' else 'BIGINT'} NOT NULL DEFAULT 0"
        for c in USAGE_COLUMNS
    ),
    "CREATE INDEX tasks_by_created ON tasks (backend, created_at, id)",
    "CREATE INDEX tasks_by_updated ON tasks (backend, updated_at, id)",
    "CREATE INDEX tasks_counts ON tasks (backend, status, agent, tools_unrecorded)",
    "CREATE INDEX tasks_agent ON tasks (backend, agent, created_at, id)",
    "CREATE INDEX tasks_durations ON tasks (backend, duration_ms) WHERE duration_ms IS NOT NULL",
    'CREATE TABLE task_tools (task_id TEXT COLLATE "C" NOT NULL, backend TEXT NOT NULL, '
    "parent_session_id TEXT NOT NULL, tool TEXT NOT NULL, calls INTEGER NOT NULL, "
    "PRIMARY KEY (task_id, tool))",
    "CREATE INDEX task_tools_backend ON task_tools (backend, tool, calls)",
    "CREATE INDEX task_tools_parent ON task_tools (backend, parent_session_id)",
    *TASK_MODELS_TABLE,
    'CREATE TABLE cleared (id TEXT COLLATE "C" PRIMARY KEY, backend TEXT NOT NULL, '
    "cleared_at BIGINT NOT NULL)",
    "CREATE INDEX cleared_at ON cleared (backend, cleared_at)",
    "CREATE INDEX tasks_status_updated ON tasks (backend, status, updated_at, id)",
    "CREATE INDEX tasks_agent_updated ON tasks (backend, agent, updated_at, id)",
    *TOTALS_TABLES,
)

#: the queued tasks by backend and parent, for a new task's place in its parent's queue
#: (`queued_ahead`): made when missing, by every version's schema (an index only: a schema with
#: it or without it is read alike, so it needs no version of its own)
_QUEUED_INDEX = (
    "CREATE INDEX tasks_queued ON tasks (backend, parent_session_id, created_at, id) "
    "WHERE status = 'queued'"
)

_TASK_COLUMNS = "id, data, backend, owner"
#: the columns `_task_values` fills, in its order (the id last)
_WRITTEN = ", ".join(
    (
        "parent_session_id",
        "session_id",
        "status",
        "created_at",
        "data",
        "backend",
        "owner",
        "model",
        "ready",
        *DERIVED_COLUMNS,
    )
)
_COLUMNS_WRITTEN = _WRITTEN.split(", ")
_SAVE_TASK = f"UPDATE tasks SET {', '.join(c + ' = %s' for c in _COLUMNS_WRITTEN)} WHERE id = %s"
_INSERT_TASK = (
    f"INSERT INTO tasks ({_WRITTEN}, id) VALUES ({', '.join(['%s'] * len(_COLUMNS_WRITTEN))}, %s)"
)
_SORTS = {"created_at": "created_at", "updated_at": "updated_at"}
_NOTICE_COLUMNS = "id, data, backend, claimed_by, claim_expires_at, next_attempt_at"
_PENDING = sorted(s.value for s in PENDING_STATUSES)
#: a queued try again's backoff end (`Task.retry_at`), read from the record's text (a broken
#: record has none): only a queued row whose record has one is searched
_NOT_BEFORE = (
    "CASE WHEN status = 'queued' AND strpos(data, '\"retry_at\":null') = 0 "
    "THEN substring(data from '\"retry_at\":([0-9]+)')::bigint END"
)


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, fit for an error message or a log."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    params.pop("password", None)
    return make_conninfo("", **params)


def _has_nul(*values: object) -> bool:
    """Whether a text holds NUL, which PostgreSQL text cannot: no row can match it (a lookup
    finds nothing, as on the other stores), and it cannot be written."""
    return any(isinstance(v, str) and "\x00" in v for v in values)


async def _add_totals(cur: psycopg.AsyncCursor[Any], deltas: Deltas) -> None:
    """Apply changes to the running totals, in key order (so two writers never wait on each
    other's rows in a cycle)."""
    for sql, rows in total_statements(deltas, "%s"):
        await cur.executemany(sql, rows)


async def _remove_totals(conn: psycopg.AsyncConnection[Any], ids: list[str]) -> None:
    """Take the tasks `ids` (their rows locked) out of the running totals and delete their tool
    and model rows, before the tasks are deleted."""
    counts, tools, usage = removal_deltas("id = ANY(%s)", "task_id = ANY(%s)")
    read = []
    for sql in (counts, tools, *usage):
        cur = await conn.execute(sql, (ids,))
        read.append(await cur.fetchall())
    async with conn.cursor() as cur:
        await _add_totals(cur, removed_deltas(read[0], read[1], [r for x in read[2:] for r in x]))
    await conn.execute("DELETE FROM task_tools WHERE task_id = ANY(%s)", (ids,))
    await conn.execute("DELETE FROM task_models WHERE task_id = ANY(%s)", (ids,))


async def _cleared(conn: psycopg.AsyncConnection[Any], rows: Sequence[Sequence[Any]]) -> None:
    """Remember the ids of deleted tasks (rows of `_TASK_COLUMNS`) for `changed_since`."""
    now = now_ms()
    if rows:
        async with conn.cursor() as many:
            await many.executemany(
                "INSERT INTO cleared (id, backend, cleared_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET backend = excluded.backend, "
                "cleared_at = excluded.cleared_at",
                [(r[0], r[2], now) for r in rows],
            )
    await conn.execute("DELETE FROM cleared WHERE cleared_at < %s", (now - CLEARED_MEMORY_MS,))


def _where(clauses: Sequence[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """``col = %s AND ...`` for every clause whose value is not None, and the values."""
    given = [(column, value) for column, value in clauses if value is not None]
    sql = " AND ".join(f"{column} = %s" for column, _ in given) or "TRUE"
    return sql, [value for _, value in given]


class PostgresTaskStore:
    """A `TaskStore` in PostgreSQL (psycopg 3, async, with a connection pool).

    `open` is called by the first call if it was not awaited before. `timeout` bounds the wait for
    a pooled connection and `connect_timeout` each connection attempt; every statement is bounded
    by `statement_timeout` (seconds). Any database failure raises `StoreError` naming the DSN
    without its password.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "asyncagents",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
    ) -> None:
        if not _IDENTIFIER.fullmatch(schema):
            raise ValueError(
                f"schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got {schema!r}"
            )
        self.dsn = dsn
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] | None = None
        self._open_lock = asyncio.Lock()
        self._where = f"PostgreSQL task store {redact_dsn(dsn)!r} (schema {schema})"
        try:
            self._password = conninfo_to_dict(dsn).get("password") or None
        except psycopg.Error:
            self._password = None

    # --- plumbing --------------------------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        cause = str(exc).strip() or type(exc).__name__
        if self._password:
            cause = cause.replace(str(self._password), "***")
        return StoreError(f"{self._where}: {what} failed: {cause}")

    def _check_writable(self, *values: object) -> None:
        """`StoreError` for a key PostgreSQL text cannot hold (NUL), before any statement."""
        if _has_nul(*values):
            raise StoreError(
                f"{self._where}: cannot store a key holding a NUL character (PostgreSQL text "
                "cannot hold one)"
            )

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "connect_timeout": max(1, round(self.connect_timeout))}

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT set_config('search_path', %s, false), "
            "set_config('statement_timeout', %s, false)",
            (self.schema, str(seconds_to_ms(self.statement_timeout))),
        )

    async def open(self) -> None:
        async with self._open_lock:
            if self._pool is not None:
                return
            try:
                conn = await asyncio.wait_for(
                    psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs()),
                    self.connect_timeout + 5,
                )
            except (TimeoutError, psycopg.Error, OSError) as exc:
                raise self._error("connecting", exc) from exc
            try:
                async with conn:
                    await self._configure(conn)
                    await self._prepare_schema(conn)
            except psycopg.Error as exc:
                raise self._error("opening the store", exc) from exc
            pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
            pool = AsyncConnectionPool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.timeout,
                kwargs=self._connect_kwargs(),
                configure=self._configure,
                # a connection broken by a server restart is replaced, not handed out
                check=AsyncConnectionPool.check_connection,
                open=False,
                name=f"asyncagents-{self.schema}",
            )
            try:
                await pool.open(wait=True, timeout=self.timeout)
            except (PoolTimeout, psycopg.Error) as exc:
                await pool.close()
                raise self._error("opening the connection pool", exc) from exc
            self._pool = pool

    async def _prepare_schema(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Create our tables in an empty schema; `StoreError` if the schema is not ours."""
        async with conn.transaction():
            # one opener at a time per schema: concurrent first starts do not race on CREATE
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"asyncagents.tasks:{self.schema}",)
            )
            cur = await conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                (self.schema,),
            )
            relations = frozenset(str(r[0]) for r in await cur.fetchall())
            if not relations:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                for statement in (*_SCHEMA, *_MIGRATE_1_TO_2, *_MIGRATE_2_TO_3, _QUEUED_INDEX):
                    await conn.execute(statement)  # search_path points at the schema
                await self._index_search(conn)
                await conn.execute(
                    "INSERT INTO asyncagents_meta (application, version) VALUES (%s, %s)",
                    (APPLICATION, SCHEMA_VERSION),
                )
                return
            meta: list[tuple[Any, ...]] = []
            if "asyncagents_meta" in relations:
                cur = await conn.execute("SELECT application, version FROM asyncagents_meta")
                meta = await cur.fetchall()
            if len(meta) == 1 and meta[0][0] == APPLICATION:
                version = int(meta[0][1])
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self._where}: the schema holds version {version}, newer than this "
                        f"asyncagents understands ({SCHEMA_VERSION}); upgrade asyncagents or "
                        "use another schema"
                    )
                # each migration leaves the next version's schema
                if version == 1 and relations == _V1_TABLES:
                    await self._migrate_1_to_2(conn)
                    version, relations = 2, _V2_TABLES
                if version == 2 and relations == _V2_TABLES:
                    await self._migrate_2_to_3(conn)
                    version, relations = SCHEMA_VERSION, _TABLES
                if version == SCHEMA_VERSION and relations == _TABLES:
                    await self._index_queued(conn)
                    return
            names = ", ".join(sorted(relations))
            raise StoreError(
                f"{self._where}: the schema is not an asyncagents task store (it holds: "
                f"{names}); it was left untouched. Give PostgresTaskStore another schema= or "
                "database."
            )

    async def _index_queued(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """`_QUEUED_INDEX`, unless the schema has it (a schema made before it existed)."""
        cur = await conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'tasks_queued'",
            (self.schema,),
        )
        if await cur.fetchone() is None:
            await conn.execute(_QUEUED_INDEX)

    async def _index_search(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A trigram index on ``tasks.search`` (extension ``pg_trgm``), so a search of 3 or
        more characters reads candidate rows from the index instead of every row. Without the
        extension (not installed on the server, or the role may not create it) searches still
        work, by a scan; a warning says so."""
        try:
            async with conn.transaction():  # a savepoint: a refusal leaves the rest intact
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                cur = await conn.execute(
                    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                    "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
                )
                row = await cur.fetchone()
                assert row is not None
                await conn.execute(
                    f'CREATE INDEX tasks_search ON tasks USING gin (search "{row[0]}".gin_trgm_ops)'
                )
        except psycopg.Error as exc:
            log.warning(
                "%s: no trigram index for searches (pg_trgm: %s); searches scan the tasks",
                self._where,
                str(exc).strip(),
            )

    @staticmethod
    async def _migrate_1_to_2(conn: psycopg.AsyncConnection[Any]) -> None:
        """Add the admission columns and table; copy the agent of the pending tasks (read in
        Python: a row whose JSON is broken must not fail the migration)."""
        for statement in _MIGRATE_1_TO_2:
            await conn.execute(statement)
        cur = await conn.execute("SELECT id, data FROM tasks WHERE status = ANY(%s)", (_PENDING,))
        for task_id, data in await cur.fetchall():
            try:
                agent = json.loads(data).get("agent")
            except (ValueError, AttributeError):
                continue
            if isinstance(agent, str):
                await conn.execute("UPDATE tasks SET agent = %s WHERE id = %s", (agent, task_id))
        await conn.execute("UPDATE asyncagents_meta SET version = 2")

    async def _migrate_2_to_3(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Add the queries' columns, tables and running totals, filled from every task."""
        for statement in _MIGRATE_2_TO_3:
            await conn.execute(statement)
        await self._fill_derived(conn)
        for statement in REBUILD_TOTALS:
            await conn.execute(statement)
        await self._index_search(conn)
        await conn.execute("UPDATE asyncagents_meta SET version = %s", (SCHEMA_VERSION,))

    async def close(self) -> None:
        async with self._open_lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    @asynccontextmanager
    async def _connection(self, what: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection; database failures become `StoreError` (others pass through)."""
        if self._pool is None:
            await self.open()
        pool = self._pool
        if pool is None:  # closed concurrently
            raise StoreError(f"{self._where}: {what} failed: the store was closed")
        try:
            async with pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise self._error(what, exc) from exc

    async def _fetch(
        self, what: str, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[Any]:
        async with self._connection(what) as conn:
            cur = await conn.execute(sql, args)
            return await cur.fetchall()

    async def _execute(self, what: str, sql: str, args: Sequence[Any] = ()) -> None:
        async with self._connection(what) as conn:
            await conn.execute(sql, args)

    def _tasks(self, rows: list[Any]) -> list[Task]:
        loaded = (load_task(self._where, r[0], r[1], r[2], r[3]) for r in rows)
        return [t for t in loaded if t is not None]

    def _notices(self, rows: list[Any]) -> list[Notice]:
        loaded = (load_notice(self._where, *r[:6]) for r in rows)
        return [n for n in loaded if n is not None]

    # --- tasks -----------------------------------------------------------------------------------

    @staticmethod
    def _task_values(task: Task) -> tuple[Any, ...]:
        return (
            task.parent_session_id,
            task.session_id,
            task.status.value,
            task.created_at,
            task.model_dump_json(),
            task.backend,
            task.owner,
            task.model,
            task.ready,
            *derived(task),
            task.id,
        )

    @staticmethod
    async def _save_footprint(
        conn: psycopg.AsyncConnection[Any],
        task: Task,
        before: Footprint | None,
        *,
        totals: bool = True,
    ) -> Deltas:
        """Keep the task's tool and model rows (``task_tools``, ``task_models``) and, with
        `totals`, the running totals (``task_counts``, ``tool_totals``, ``usage_totals``) as the
        task now says; `before` is its footprint as stored until now (None: a new task).
        Returns the change of the totals (without `totals`, for the caller to apply)."""
        after = Footprint.of(task)
        async with conn.cursor() as cur:
            if before is None or before[2] != after[2]:
                if before is not None:
                    await cur.execute("DELETE FROM task_tools WHERE task_id = %s", (task.id,))
                rows = [
                    (task.id, task.backend, task.parent_session_id, name, calls)
                    for name, calls in task.progress.tools.items()
                ]
                if rows:
                    await cur.executemany(
                        "INSERT INTO task_tools (task_id, backend, parent_session_id, tool, "
                        "calls) VALUES (%s, %s, %s, %s, %s)",
                        rows,
                    )
            if before is None or before[3] != after[3]:
                if before is not None:
                    await cur.execute("DELETE FROM task_models WHERE task_id = %s", (task.id,))
                backend, parent, _, models = after[3]
                if models:
                    await cur.executemany(
                        INSERT_MODEL.format(p="%s"),
                        [(task.id, backend, parent, model, *used) for model, used in models],
                    )
            deltas = total_deltas(before, after)
            if totals:
                await _add_totals(cur, deltas)
        return deltas

    async def _save_task(
        self,
        conn: psycopg.AsyncConnection[Any],
        task: Task,
        before: Footprint | None,
        *,
        totals: bool = True,
    ) -> Deltas:
        """Write a stored task's row, its tool and model rows and (with `totals`) the running
        totals; returns the totals' change."""
        await conn.execute(_SAVE_TASK, self._task_values(task))
        return await self._save_footprint(conn, task, before, totals=totals)

    async def _fill_derived(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Migration to version 3: the derived columns, tool rows and model rows of every stored
        task (a row that does not load keeps its columns; its agent: version 2's)."""
        await conn.execute(
            "UPDATE tasks SET updated_at = created_at, root_session_id = parent_session_id"
        )
        cur = await conn.execute(f"SELECT {_TASK_COLUMNS} FROM tasks")
        for task in self._tasks(await cur.fetchall()):
            await conn.execute(
                f"UPDATE tasks SET {', '.join(c + ' = %s' for c in DERIVED_COLUMNS)} WHERE id = %s",
                (*derived(task), task.id),
            )
            await self._save_footprint(conn, task, None, totals=False)

    async def insert(self, task: Task) -> None:
        self._check_writable(task.id, task.parent_session_id, task.session_id, task.backend)
        async with self._connection(f"inserting task {task.id}") as conn, conn.transaction():
            await conn.execute(_INSERT_TASK, self._task_values(task))
            await self._save_footprint(conn, task, None)

    async def get(self, task_id: str) -> Task | None:
        if _has_nul(task_id):
            return None
        rows = await self._fetch(
            f"reading task {task_id}",
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = %s",
            (task_id,),
        )
        tasks = self._tasks(rows)
        return tasks[0] if tasks else None

    async def ids_with_prefix(
        self, prefix: str, parent_session_id: str | None = None, limit: int = 2
    ) -> list[str]:
        if _has_nul(prefix, parent_session_id):
            return []
        where, args = _where([("parent_session_id", parent_session_id)])
        rows = await self._fetch(
            "looking up task ids",
            f"SELECT id FROM tasks WHERE starts_with(id, %s) AND {where} ORDER BY id LIMIT %s",
            [prefix, *args, max(limit, 0)],
        )
        return [str(r[0]) for r in rows]

    async def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        if _has_nul(task_id):
            return None
        async with self._connection(f"updating task {task_id}") as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = %s FOR UPDATE", (task_id,)
            )
            tasks = self._tasks(await cur.fetchall())
            before = Footprint.of(tasks[0]) if tasks else None
            out = mutate(tasks[0]) if tasks else None
            if out is None:
                return None
            new, notice = out
            self._check_writable(new.parent_session_id, new.session_id, new.backend, new.owner)
            if notice is not None:
                self._check_writable(notice.id, notice.parent_session_id, notice.backend)
            await self._save_task(conn, new, before)
            if notice is not None:
                await conn.execute(
                    "INSERT INTO notices (parent_session_id, created_at, data, backend, "
                    "claimed_by, claim_expires_at, next_attempt_at, id) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                    "parent_session_id = excluded.parent_session_id, "
                    "created_at = excluded.created_at, data = excluded.data, "
                    "backend = excluded.backend, claimed_by = excluded.claimed_by, "
                    "claim_expires_at = excluded.claim_expires_at, "
                    "next_attempt_at = excluded.next_attempt_at",
                    (
                        notice.parent_session_id,
                        notice.created_at,
                        notice.model_dump_json(),
                        notice.backend,
                        notice.claimed_by,
                        notice.claim_expires_at,
                        notice.next_attempt_at,
                        notice.id,
                    ),
                )
            return new, notice

    async def list_tasks(
        self,
        parent_session_id: str | None = None,
        statuses: Collection[TaskStatus] | None = None,
        *,
        backend: str | None = None,
        owner: str | None = None,
    ) -> list[Task]:
        if _has_nul(parent_session_id, backend, owner):
            return []
        where, args = _where(
            [("parent_session_id", parent_session_id), ("backend", backend), ("owner", owner)]
        )
        if statuses is not None:
            values = sorted({s.value for s in statuses})
            if not values:
                return []
            where += " AND status = ANY(%s)"
            args.append(values)
        rows = await self._fetch(
            "listing tasks",
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {where} ORDER BY created_at DESC, id DESC",
            args,
        )
        return self._tasks(rows)

    async def find_by_session(self, session_id: str) -> Task | None:
        if _has_nul(session_id):
            return None
        rows = await self._fetch(
            f"finding the task of session {session_id}",
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE session_id = %s "
            "ORDER BY created_at DESC, id DESC LIMIT 1",
            (session_id,),
        )
        tasks = self._tasks(rows)
        return tasks[0] if tasks else None

    async def delete_parent(self, parent_session_id: str, backend: str | None = None) -> list[Task]:
        if _has_nul(parent_session_id, backend):
            return []
        where, args = _where([("parent_session_id", parent_session_id), ("backend", backend)])
        what = f"deleting the tasks of parent {parent_session_id}"
        async with self._connection(what) as conn, conn.transaction():
            # the rows locked first, then deleted by id: a task inserted meanwhile stays, and
            # is in the totals
            cur = await conn.execute(
                f"SELECT {_TASK_COLUMNS}, created_at FROM tasks WHERE {where} FOR UPDATE", args
            )
            rows = await cur.fetchall()
            ids = [str(r[0]) for r in rows]
            await _remove_totals(conn, ids)
            await conn.execute("DELETE FROM tasks WHERE id = ANY(%s)", (ids,))
            await conn.execute(f"DELETE FROM notices WHERE {where}", args)
            await conn.execute(f"DELETE FROM queue_turns WHERE {where}", args)
            await _cleared(conn, rows)
        rows.sort(key=lambda r: (r[4], r[0]), reverse=True)
        return self._tasks(rows)

    # --- queries ---------------------------------------------------------------------------------

    async def query_tasks(self, query: TaskQuery) -> TaskPage:
        if query.matches_nothing:
            return query.empty_page()
        where = ["backend = %s"]
        args: list[Any] = [query.backend]
        if query.parent_session_id is not None:
            where.append("parent_session_id = %s")
            args.append(query.parent_session_id)
        if query.statuses is not None:
            where.append("status = ANY(%s)")
            args.append(sorted(s.value for s in query.statuses))
        if query.agent is not None:
            where.append("agent = %s")
            args.append(query.agent)
        if query.text:
            where.append("search LIKE %s")  # served by the trigram index when there is one
            args.append(like_pattern(query.text))
        column = _SORTS[query.sort]
        order = "DESC" if query.descending else "ASC"
        page_where, page_args = list(where), list(args)
        if query.after is not None:
            page_where.append(f"({column}, id) {'<' if query.descending else '>'} (%s, %s)")
            page_args.extend(query.after)
        async with self._connection("querying tasks") as conn:
            cur = await conn.execute(
                f"SELECT {_TASK_COLUMNS}, {column} FROM tasks WHERE {' AND '.join(page_where)} "
                f"ORDER BY {column} {order}, id {order} LIMIT %s",
                [*page_args, query.limit + 1],
            )
            rows = await cur.fetchall()
            total = usage = None
            if query.count:
                cur = await conn.execute(*count_query(query, where, args, "%s"))
                found = await cur.fetchone()
                assert found is not None
                total, usage = counted_page(found)
        more = len(rows) > query.limit
        rows = rows[: query.limit]
        last = rows[-1] if rows and more else None
        return TaskPage(
            tasks=self._tasks(rows),
            total=total,
            usage=usage,
            next_after=None if last is None else (int(last[4]), str(last[0])),
        )

    async def task_stats(
        self, backend: str, parent_session_id: str | None = None, top: int = TOP_DEFAULT
    ) -> TaskStats:
        if has_nul(backend, parent_session_id):
            return stats_of([])
        async with self._connection("counting tasks") as conn, conn.transaction():
            # one snapshot for every count
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if parent_session_id is not None:
                args: tuple[str, ...] = (backend, parent_session_id)
                mine = "WHERE backend = %s AND parent_session_id = %s"
                cur = await conn.execute(PARENT_COUNTS.format(p="%s"), args)
                counts = await cur.fetchall()
                cur = await conn.execute(
                    f"SELECT tool, sum(calls) FROM task_tools {mine} GROUP BY tool", args
                )
                tools = await cur.fetchall()
                cur = await conn.execute(
                    f"SELECT duration_ms FROM tasks {mine} AND duration_ms IS NOT NULL", args
                )
                durations = duration_summary([int(r[0]) for r in await cur.fetchall()])
                cur = await conn.execute(PARENT_USAGE.format(p="%s"), args * 3)
                return stats_from(counts, tools, durations, await cur.fetchall(), top)
            cur = await conn.execute(TOTAL_COUNTS.format(p="%s"), (backend,))
            counts = await cur.fetchall()
            cur = await conn.execute(
                "SELECT tool, calls FROM tool_totals WHERE backend = %s AND calls != 0",
                (backend,),
            )
            tools = await cur.fetchall()
            timed = sum(int(r[4]) for r in counts)
            summary = DurationSummary()
            if timed:
                index = "FROM tasks WHERE backend = %s AND duration_ms IS NOT NULL"

                async def ranked(rank: int) -> int:
                    # walk the duration index from the nearer end
                    order, skip = ("", rank - 1) if rank <= timed // 2 else ("DESC", timed - rank)
                    cur = await conn.execute(
                        f"SELECT duration_ms {index} ORDER BY duration_ms {order} "
                        "LIMIT 1 OFFSET %s",
                        (backend, skip),
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    return int(row[0])

                lo, hi = median_ranks(timed)
                cur = await conn.execute(
                    f"SELECT duration_ms {index} ORDER BY duration_ms LIMIT %s OFFSET %s",
                    (backend, hi - lo + 1, lo - 1),
                )
                middle = [int(r[0]) for r in await cur.fetchall()]
                low, high = middle[0], middle[-1]
                summary = DurationSummary(
                    count=timed,
                    min_ms=await ranked(1),
                    median_ms=low if lo == hi else (low + high) / 2,
                    p95_ms=await ranked(percentile_rank(timed, 0.95)),
                    max_ms=await ranked(timed),
                )
            cur = await conn.execute(TOTAL_USAGE.format(p="%s"), (backend,))
            usage = await cur.fetchall()
            for kind in ("parent", "tree"):
                cur = await conn.execute(
                    TOP_USAGE.format(p="%s", c=' COLLATE "C"'), (backend, kind, top)
                )
                usage += await cur.fetchall()
            cur = await conn.execute(KEY_COUNTS.format(p="%s"), (backend,))
            keys = await cur.fetchall()
            return stats_from(counts, tools, summary, usage, top, keys)

    async def changed_since(self, backend: str, since: int) -> TaskChanges:
        if has_nul(backend):
            return TaskChanges(tasks=[], cleared=[])
        async with self._connection("reading changed tasks") as conn:
            cur = await conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE backend = %s AND updated_at >= %s "
                "ORDER BY updated_at, id",
                (backend, since),
            )
            tasks = self._tasks(await cur.fetchall())
            cur = await conn.execute(
                "SELECT id FROM cleared WHERE backend = %s AND cleared_at >= %s "
                "ORDER BY cleared_at, id",
                (backend, since),
            )
            cleared = [str(r[0]) for r in await cur.fetchall()]
        return TaskChanges(tasks=tasks, cleared=cleared)

    # --- ownership -------------------------------------------------------------------------------

    async def renew_lease(self, owner: str, backend: str, ttl: float) -> None:
        self._check_writable(owner, backend)
        await self._execute(
            f"renewing the lease of {owner}",
            f"INSERT INTO leases (owner, backend, expires_at) VALUES (%s, %s, {_NOW} + %s) "
            "ON CONFLICT (owner) DO UPDATE SET backend = excluded.backend, "
            "expires_at = excluded.expires_at",
            (owner, backend, seconds_to_ms(ttl)),
        )

    async def drop_lease(self, owner: str) -> None:
        if _has_nul(owner):
            return
        await self._execute(
            f"dropping the lease of {owner}", "DELETE FROM leases WHERE owner = %s", (owner,)
        )

    async def take_over(self, owner: str, backend: str, limit: int = 500) -> list[Task]:
        self._check_writable(owner, backend)
        # Step 1 locks candidates (SKIP LOCKED: rows another taker holds are left to it). A row
        # that another taker changed after this statement's snapshot is re-checked against its
        # new owner but with the old snapshot of `leases`, which may miss that taker's fresh
        # lease; so step 2, a new statement (new snapshot) on rows we now hold, re-checks the
        # lease before taking them.
        what = f"taking over tasks of backend {backend!r} for {owner}"
        args = {"backend": backend, "active": _PENDING, "owner": owner, "limit": max(limit, 0)}
        orphaned = (
            "owner IS DISTINCT FROM %(owner)s AND NOT EXISTS (SELECT 1 FROM leases l "
            f"WHERE l.owner = tasks.owner AND l.expires_at > {_NOW})"
        )
        async with self._connection(what) as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT id FROM tasks WHERE backend = %(backend)s AND status = ANY(%(active)s) "
                f"AND {orphaned} ORDER BY created_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
                args,
            )
            ids = [r[0] for r in await cur.fetchall()]
            if not ids:
                return []
            cur = await conn.execute(
                f"UPDATE tasks SET owner = %(owner)s WHERE id = ANY(%(ids)s) AND {orphaned} "
                f"RETURNING {_TASK_COLUMNS}, created_at",
                {**args, "ids": ids},
            )
            rows = await cur.fetchall()
        rows.sort(key=lambda r: (r[4], r[0]))
        return self._tasks(rows)

    # --- admission -------------------------------------------------------------------------------

    @staticmethod
    async def _queue_view(conn: psycopg.AsyncConnection[Any], backend: str) -> QueueView:
        cur = await conn.execute(
            "SELECT id, parent_session_id, status, created_at, agent, model, ready, owner, "
            "EXISTS (SELECT 1 FROM leases l WHERE l.owner = tasks.owner "
            f"AND l.expires_at > {_NOW}), {_NOT_BEFORE} FROM tasks "
            "WHERE backend = %s AND status = ANY(%s)",
            (backend, _PENDING),
        )
        entries = [
            Entry(
                id=str(r[0]),
                parent=str(r[1]),
                agent=str(r[4]),
                model=r[5],
                created_at=int(r[3]),
                running=r[2] != TaskStatus.QUEUED.value,
                ready=bool(r[6]),
                owner=r[7],
                owner_live=bool(r[8]),
                not_before=int(r[9]) if r[9] is not None else None,
            )
            for r in await cur.fetchall()
        ]
        cur = await conn.execute(
            "SELECT parent_session_id, admitted_at FROM queue_turns WHERE backend = %s",
            (backend,),
        )
        turns = {str(r[0]): int(r[1]) for r in await cur.fetchall()}
        return QueueView(entries=entries, last_admitted=turns)

    async def queue_view(self, backend: str) -> QueueView:
        async with self._connection(f"reading the queue of backend {backend!r}") as conn:
            async with conn.transaction():  # one snapshot for both reads
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return await self._queue_view(conn, backend)

    async def tree_costs(self, parent_session_ids: Collection[str]) -> list[TaskCost]:
        parents = [p for p in dict.fromkeys(parent_session_ids) if not _has_nul(p)]
        if not parents:
            return []
        rows = await self._fetch(
            "reading the costs of a tree of tasks",
            "SELECT id, session_id, cost FROM tasks WHERE parent_session_id = ANY(%s)",
            (parents,),
        )
        return [TaskCost(str(r[0]), r[1], float(r[2])) for r in rows]

    async def queued_ahead(self, task: Task) -> int:
        if _has_nul(task.backend, task.parent_session_id, task.id):
            return 0
        rows = await self._fetch(
            f"counting the queue before task {task.id}",
            "SELECT count(*) FROM tasks WHERE backend = %s AND parent_session_id = %s "
            "AND status = 'queued' AND (created_at, id) < (%s, %s)",
            (task.backend, task.parent_session_id, task.created_at, task.id),
        )
        return int(rows[0][0])

    async def admit(
        self,
        backend: str,
        caps: Caps,
        owner: str,
        limit: int = 100,
        *,
        include: Include = None,
        fresh_ms: int = FRESH_MS,
    ) -> list[Task]:
        what = f"admitting queued tasks of backend {backend!r}"
        out: list[Task] = []
        # a look without the lock first: most passes at saturation find nothing to start, and
        # need not queue for the lock every other admitter wants (the locked pass decides)
        peek = await self.queue_view(backend)
        if not choose(
            peek.entries,
            peek.last_admitted,
            caps,
            1,
            include=include,
            me=owner,
            now=now_ms(),
            fresh_ms=fresh_ms,
        ):
            return []
        async with self._connection(what) as conn, conn.transaction():
            # every admitter of the backend, on any host, waits here: the counts read below
            # include every admission committed before (read committed, statement snapshots)
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"asyncagents.admit:{self.schema}:{backend}",),
            )
            view = await self._queue_view(conn, backend)
            now = now_ms()
            chosen = choose(
                view.entries,
                view.last_admitted,
                caps,
                limit,
                include=include,
                me=owner,
                now=now,
                fresh_ms=fresh_ms,
            )
            changes: list[Deltas] = []
            for entry, key in zip(
                chosen, turn_keys(now, len(chosen), view.last_admitted), strict=True
            ):
                cur = await conn.execute(
                    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = %s FOR UPDATE", (entry.id,)
                )
                tasks = self._tasks(await cur.fetchall())
                # before `admitted`, which may change the task it is given
                before = Footprint.of(tasks[0]) if tasks else None
                changed = admitted(tasks[0], owner, now, include) if tasks else None
                if changed is None:
                    continue  # cancelled or cleared since the count (it waited for our lock)
                changes.append(await self._save_task(conn, changed, before, totals=False))
                await conn.execute(
                    "INSERT INTO queue_turns (backend, parent_session_id, admitted_at) "
                    "VALUES (%s, %s, %s) ON CONFLICT (backend, parent_session_id) "
                    "DO UPDATE SET admitted_at = excluded.admitted_at",
                    (backend, entry.parent, key),
                )
                out.append(changed)
            # the totals of every admitted task at once, in key order, as every writer takes
            # them (task by task, two writers could wait on each other's rows)
            async with conn.cursor() as totals:
                await _add_totals(totals, merged(changes))
        return out

    async def delete_queued(self, task_id: str) -> Task | None:
        if _has_nul(task_id):
            return None
        async with (
            self._connection(f"deleting queued task {task_id}") as conn,
            conn.transaction(),
        ):
            cur = await conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = %s AND status = %s FOR UPDATE",
                (task_id, TaskStatus.QUEUED.value),
            )
            rows = await cur.fetchall()
            if not rows:
                return None
            await _remove_totals(conn, [task_id])
            await conn.execute("DELETE FROM tasks WHERE id = %s", (task_id,))
            await _cleared(conn, rows)
        tasks = self._tasks(rows)
        return tasks[0] if tasks else None

    async def descendants(self, session_id: str) -> list[Task]:
        rows = await self._fetch(
            f"reading the task tree of session {session_id}",
            "WITH RECURSIVE tree(id, session_id) AS ("
            "SELECT id, session_id FROM tasks WHERE parent_session_id = %s UNION "
            "SELECT t.id, t.session_id FROM tasks t JOIN tree "
            "ON t.parent_session_id = tree.session_id) "
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id IN (SELECT id FROM tree) "
            "ORDER BY created_at, id",
            (session_id,),
        )
        return self._tasks(rows)

    # --- notices ---------------------------------------------------------------------------------

    async def notices(
        self, parent_session_id: str | None = None, *, backend: str | None = None
    ) -> list[Notice]:
        if _has_nul(parent_session_id, backend):
            return []
        where, args = _where([("parent_session_id", parent_session_id), ("backend", backend)])
        rows = await self._fetch(
            "listing notices",
            f"SELECT {_NOTICE_COLUMNS} FROM notices WHERE {where} ORDER BY created_at, id",
            args,
        )
        return self._notices(rows)

    async def claim_notices(
        self,
        owner: str,
        backend: str,
        claim_ttl: float,
        *,
        parent_session_id: str | None = None,
        limit: int = 100,
    ) -> list[Notice]:
        if _has_nul(owner, backend, parent_session_id):
            return []
        parent = "" if parent_session_id is None else "AND parent_session_id = %(parent)s "
        rows = await self._fetch(
            f"claiming notices of backend {backend!r} for {owner}",
            "WITH due AS (SELECT id FROM notices WHERE backend = %(backend)s "
            f"AND next_attempt_at <= {_NOW} "
            f"AND (claimed_by IS NULL OR claim_expires_at <= {_NOW}) {parent}"
            "ORDER BY created_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
            f"UPDATE notices n SET claimed_by = %(owner)s, claim_expires_at = {_NOW} + %(ttl)s "
            "FROM due WHERE n.id = due.id RETURNING n.id, n.data, n.backend, n.claimed_by, "
            "n.claim_expires_at, n.next_attempt_at, n.created_at",
            {
                "backend": backend,
                "parent": parent_session_id,
                "limit": max(limit, 0),
                "owner": owner,
                "ttl": seconds_to_ms(claim_ttl),
            },
        )
        rows.sort(key=lambda r: (r[6], r[0]))
        return self._notices(rows)

    async def release_notice(self, notice: Notice) -> None:
        if _has_nul(notice.id, notice.claimed_by):
            return
        data = notice.model_copy(update={"claimed_by": None, "claim_expires_at": None})
        await self._execute(
            f"releasing notice {notice.id}",
            "UPDATE notices SET data = %s, next_attempt_at = %s, claimed_by = NULL, "
            "claim_expires_at = NULL WHERE id = %s AND claimed_by IS NOT DISTINCT FROM %s",
            (data.model_dump_json(), notice.next_attempt_at, notice.id, notice.claimed_by),
        )

    async def delete_notice(self, notice_id: str) -> None:
        if _has_nul(notice_id):
            return
        await self._execute(
            f"deleting notice {notice_id}", "DELETE FROM notices WHERE id = %s", (notice_id,)
        )
