"""`SQLiteTaskStore`: tasks, leases and notices in one SQLite file, shared by local processes.

One connection per store, used from a worker thread (`asyncio.to_thread`) under a lock, so a
large write never blocks the event loop. Every change is one ``BEGIN IMMEDIATE`` transaction:
the write lock is taken up front, so concurrent processes on the same file queue
(``busy_timeout``) instead of interleaving or deadlocking on a lock upgrade. This serialisation is
what makes `take_over` and `claim_notices` hand each task and notice to one caller only. A call
whose caller is cancelled still finishes (or rolls back) its transaction in the thread: it is
never cut off halfway.

The file carries our ``application_id`` and a schema version in ``user_version``. `open` creates
the schema in an empty file, migrates our own older layout (version 1: the two tables of the first
release, without ``user_version``) in one transaction, and refuses any other database without
touching it. Times are epoch milliseconds of this machine's clock.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

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

T = TypeVar("T")

#: ``PRAGMA application_id`` of an asyncagents task store ("AsAg")
APPLICATION_ID = 0x41734167
#: ``PRAGMA user_version`` this code writes; version 1 is the first release's layout (no pragmas)
SCHEMA_VERSION = 4

#: the first release's tables, exactly; also the base the current schema is migrated from
_V1_SCHEMA = (
    "CREATE TABLE tasks (id TEXT PRIMARY KEY, parent_session_id TEXT NOT NULL, session_id TEXT, "
    "status TEXT NOT NULL, created_at INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX tasks_parent ON tasks (parent_session_id, created_at)",
    "CREATE INDEX tasks_session ON tasks (session_id)",
    "CREATE INDEX tasks_status ON tasks (status)",
    "CREATE TABLE notices (id TEXT PRIMARY KEY, parent_session_id TEXT NOT NULL, "
    "created_at INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX notices_parent ON notices (parent_session_id, created_at)",
)
_V1_TABLES = {
    "tasks": ["id", "parent_session_id", "session_id", "status", "created_at", "data"],
    "notices": ["id", "parent_session_id", "created_at", "data"],
}
#: version 1 -> 2: ownership columns, leases, notice claims (a new file gets v1 + this, so both
#: paths end in the same layout)
_MIGRATE_1_TO_2 = (
    "ALTER TABLE tasks ADD COLUMN backend TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN owner TEXT",
    "CREATE INDEX tasks_backend_status ON tasks (backend, status, created_at)",
    "CREATE INDEX tasks_owner ON tasks (owner)",
    "ALTER TABLE notices ADD COLUMN backend TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE notices ADD COLUMN claimed_by TEXT",
    "ALTER TABLE notices ADD COLUMN claim_expires_at INTEGER",
    "ALTER TABLE notices ADD COLUMN next_attempt_at INTEGER NOT NULL DEFAULT 0",
    # a row whose JSON is broken keeps 0 (due now) and is skipped with a warning when read
    "UPDATE notices SET next_attempt_at = CASE WHEN json_valid(data) THEN "
    "coalesce(CAST(json_extract(data, '$.next_attempt_at') AS INTEGER), 0) ELSE 0 END",
    "CREATE INDEX notices_claim ON notices (backend, next_attempt_at, created_at)",
    "CREATE TABLE leases (owner TEXT PRIMARY KEY, backend TEXT NOT NULL, "
    "expires_at INTEGER NOT NULL)",
)
_V2_TABLES = {
    "tasks": [*_V1_TABLES["tasks"], "backend", "owner"],
    "notices": [
        *_V1_TABLES["notices"],
        "backend",
        "claimed_by",
        "claim_expires_at",
        "next_attempt_at",
    ],
    "leases": ["owner", "backend", "expires_at"],
}
#: version 2 -> 3: the admission queue. The columns admission counts by (copies of the task's
#: fields, written with every change), and each parent's last admission (round robin)
_MIGRATE_2_TO_3 = (
    "ALTER TABLE tasks ADD COLUMN agent TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN model TEXT",
    "ALTER TABLE tasks ADD COLUMN ready INTEGER NOT NULL DEFAULT 1",
    "UPDATE tasks SET agent = coalesce(CASE WHEN json_valid(data) THEN "
    "CAST(json_extract(data, '$.agent') AS TEXT) END, '')",
    "CREATE TABLE queue_turns (backend TEXT NOT NULL, parent_session_id TEXT NOT NULL, "
    "admitted_at INTEGER NOT NULL, PRIMARY KEY (backend, parent_session_id))",
)
_V3_TABLES = {
    **_V2_TABLES,
    "tasks": [*_V2_TABLES["tasks"], "agent", "model", "ready"],
    "queue_turns": ["backend", "parent_session_id", "admitted_at"],
}
#: version 3 -> 4: the columns and indexes that let lists, searches, stats and change polls run
#: in SQL (their values come from each row's JSON, filled in by `_fill_derived`; ``agent`` is
#: version 3's column, refilled), the tool calls and usage by name, the running totals, and the
#: ids of cleared tasks (for readers that poll for changes)
_MIGRATE_3_TO_4 = (
    "ALTER TABLE tasks ADD COLUMN updated_at INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tasks ADD COLUMN duration_ms INTEGER",
    "ALTER TABLE tasks ADD COLUMN search TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN tools_unrecorded INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tasks ADD COLUMN root_session_id TEXT NOT NULL DEFAULT ''",
    *(
        f"ALTER TABLE tasks ADD COLUMN {c} {'REAL' if c == 'cost' else 'INTEGER'} "
        "NOT NULL DEFAULT 0"
        for c in USAGE_COLUMNS
    ),
    "CREATE INDEX tasks_by_created ON tasks (backend, created_at, id)",
    "CREATE INDEX tasks_by_updated ON tasks (backend, updated_at, id)",
    "CREATE INDEX tasks_counts ON tasks (backend, status, agent, tools_unrecorded)",
    "CREATE INDEX tasks_agent ON tasks (backend, agent, created_at, id)",
    "CREATE INDEX tasks_durations ON tasks (backend, duration_ms) WHERE duration_ms IS NOT NULL",
    "CREATE TABLE task_tools (task_id TEXT NOT NULL, backend TEXT NOT NULL, "
    "parent_session_id TEXT NOT NULL, tool TEXT NOT NULL, calls INTEGER NOT NULL, "
    "PRIMARY KEY (task_id, tool))",
    "CREATE INDEX task_tools_backend ON task_tools (backend, tool, calls)",
    "CREATE INDEX task_tools_parent ON task_tools (backend, parent_session_id)",
    *TASK_MODELS_TABLE,
    "CREATE TABLE cleared (id TEXT PRIMARY KEY, backend TEXT NOT NULL, "
    "cleared_at INTEGER NOT NULL)",
    "CREATE INDEX cleared_at ON cleared (backend, cleared_at)",
    "CREATE INDEX tasks_status_updated ON tasks (backend, status, updated_at, id)",
    "CREATE INDEX tasks_agent_updated ON tasks (backend, agent, updated_at, id)",
    *TOTALS_TABLES,
)
#: the queued tasks by backend and parent, for a new task's place in its parent's queue
#: (`queued_ahead`): made on every open if missing (an index only: the files of every version
#: with it or without it are read alike, so it needs no version of its own)
_QUEUED_INDEX = (
    "CREATE INDEX IF NOT EXISTS tasks_queued ON tasks (backend, parent_session_id, created_at, "
    "id) WHERE status = 'queued'"
)
#: the search index, made after `_fill_derived` (then built from the filled column): trigrams of
#: ``tasks.search`` (FTS5, external content), kept in step by triggers; a search of 3 or more
#: characters reads the candidate rows from it and checks each with ``instr``. Its rowids are
#: the tasks' rowids: after a ``VACUUM`` (which may renumber them) run
#: ``INSERT INTO task_search (task_search) VALUES ('rebuild')``.
_SEARCH_INDEX = (
    "CREATE VIRTUAL TABLE task_search USING fts5(search, content='tasks', "
    "content_rowid='rowid', tokenize='trigram', detail='none')",
    "CREATE TRIGGER tasks_search_insert AFTER INSERT ON tasks BEGIN "
    "INSERT INTO task_search (rowid, search) VALUES (new.rowid, new.search); END",
    "CREATE TRIGGER tasks_search_delete AFTER DELETE ON tasks BEGIN "
    "INSERT INTO task_search (task_search, rowid, search) VALUES ('delete', old.rowid, "
    "old.search); END",
    "CREATE TRIGGER tasks_search_update AFTER UPDATE OF search ON tasks "
    "WHEN old.search IS NOT new.search BEGIN "
    "INSERT INTO task_search (task_search, rowid, search) VALUES ('delete', old.rowid, "
    "old.search); INSERT INTO task_search (rowid, search) VALUES (new.rowid, new.search); END",
    "INSERT INTO task_search (task_search) VALUES ('rebuild')",
)
#: a search this long or longer uses the trigram index
_INDEXED_SEARCH = 3
_CURRENT_TABLES = {
    **_V3_TABLES,
    "tasks": [*_V3_TABLES["tasks"], *DERIVED_COLUMNS[1:]],
    "task_tools": ["task_id", "backend", "parent_session_id", "tool", "calls"],
    "task_models": ["task_id", "backend", "parent_session_id", "model", *USAGE_COLUMNS],
    "cleared": ["id", "backend", "cleared_at"],
    "task_counts": ["backend", "status", "agent", "tasks", "unrecorded", "timed", *USAGE_COLUMNS],
    "tool_totals": ["backend", "tool", "calls"],
    "usage_totals": ["backend", "kind", "key", "tasks", *USAGE_COLUMNS],
    # the search index and its shadow tables (FTS5)
    "task_search": ["search"],
    "task_search_data": ["id", "block"],
    "task_search_idx": ["segid", "term", "pgno"],
    "task_search_docsize": ["id", "sz"],
    "task_search_config": ["k", "v"],
}

#: ``data`` travels as UTF-8 bytes both ways (SQLite converts to and from TEXT): no Python-side
#: decode or encode of a large record while holding the interpreter lock
_TASK_COLUMNS = "id, CAST(data AS BLOB), backend, owner"
_NOTICE_COLUMNS = "id, CAST(data AS BLOB), backend, claimed_by, claim_expires_at, next_attempt_at"
_PENDING = tuple(sorted(s.value for s in PENDING_STATUSES))
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
_UPDATED = ", ".join(
    f"{c} = CAST(? AS TEXT)" if c == "data" else f"{c} = ?" for c in _WRITTEN.split(", ")
)
_PLACES = ", ".join("CAST(? AS TEXT)" if c == "data" else "?" for c in _WRITTEN.split(", "))
#: the sort columns `query_tasks` may use
_SORTS = {"created_at": "created_at", "updated_at": "updated_at"}
#: a queued try again's backoff end (`Task.retry_at`), read from the record: only a queued row
#: whose record has one is parsed (and a broken record has none)
_NOT_BEFORE = (
    "CASE WHEN status = 'queued' AND instr(data, '\"retry_at\":null') = 0 AND json_valid(data) "
    "THEN json_extract(data, '$.retry_at') END"
)


def _json(record: Task | Notice) -> bytes:
    """The record's JSON as UTF-8 bytes (stored as TEXT by ``CAST(? AS TEXT)``)."""
    return record.__pydantic_serializer__.to_json(record)


def _rollback(db: sqlite3.Connection) -> None:
    """End a failed transaction; an error here is dropped, the original one says more."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _in_transaction(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """`work` in one ``BEGIN IMMEDIATE`` transaction: committed, or rolled back if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        out = work(db)
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise
    return out


def _add_totals(db: sqlite3.Connection, deltas: Deltas) -> None:
    """Apply changes to the running totals (in key order)."""
    for sql, rows in total_statements(deltas, "?"):
        db.executemany(sql, rows)


def _remove_totals(db: sqlite3.Connection, where: str, rows_where: str, args: Any) -> None:
    """Take the tasks `where` selects out of the running totals and delete their tool and model
    rows (`rows_where` selects those), before the tasks are deleted."""
    counts, tools, usage = removal_deltas(where, rows_where)
    _add_totals(
        db,
        removed_deltas(
            db.execute(counts, args).fetchall(),
            db.execute(tools, args).fetchall(),
            [r for sql in usage for r in db.execute(sql, args).fetchall()],
        ),
    )
    db.execute(f"DELETE FROM task_tools WHERE {rows_where}", args)
    db.execute(f"DELETE FROM task_models WHERE {rows_where}", args)


def _cleared(db: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    """Remember the ids of deleted tasks (rows of `_TASK_COLUMNS`) for `changed_since`."""
    now = now_ms()
    db.executemany(
        "INSERT OR REPLACE INTO cleared (id, backend, cleared_at) VALUES (?, ?, ?)",
        [(r[0], r[2], now) for r in rows],
    )
    db.execute("DELETE FROM cleared WHERE cleared_at < ?", (now - CLEARED_MEMORY_MS,))


def _parent_stats(db: sqlite3.Connection, backend: str, parent: str, top: int) -> TaskStats:
    """The stats of one parent's tasks (a few: read through the parent's indexes)."""
    args = (backend, parent)
    mine = "WHERE backend = ? AND parent_session_id = ?"
    counts = db.execute(PARENT_COUNTS.format(p="?"), args).fetchall()
    tools = db.execute(f"SELECT tool, sum(calls) FROM task_tools {mine} GROUP BY tool", args)
    durations = db.execute(
        f"SELECT duration_ms FROM tasks {mine} AND duration_ms IS NOT NULL", args
    ).fetchall()
    usage = db.execute(PARENT_USAGE.format(p="?"), args * 3).fetchall()
    summary = duration_summary([r[0] for r in durations])
    return stats_from(counts, tools.fetchall(), summary, usage, top)


def _exec(sql: str, *args: Any) -> Callable[[sqlite3.Connection], None]:
    """Work that runs one statement and returns nothing."""

    def work(db: sqlite3.Connection) -> None:
        db.execute(sql, args)

    return work


class SQLiteTaskStore:
    """A `TaskStore` in one SQLite file (stdlib ``sqlite3``, WAL journal); see module docstring.

    `open` is called by the first call if it was not awaited before. Errors of the file (missing
    permission, read-only, full disk, corrupt, not ours) raise `StoreError` naming the path.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._where = f"SQLite task store {self.path}"

    # --- plumbing --------------------------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"{self._where}: {what} failed: {exc}")

    async def _run(self, what: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` on the connection in a worker thread, opening it first if needed."""
        return await asyncio.to_thread(self._locked, what, work, False)

    async def _write(self, what: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one ``BEGIN IMMEDIATE`` transaction in a worker thread."""
        return await asyncio.to_thread(self._locked, what, work, True)

    def _locked(self, what: str, work: Callable[[sqlite3.Connection], T], write: bool) -> T:
        with self._lock:
            if self._db is None:
                self._db = self._connect()
            db = self._db
            try:
                return _in_transaction(db, work) if write else work(db)
            except sqlite3.Error as exc:
                raise self._error(what, exc) from exc

    def _connect(self) -> sqlite3.Connection:
        """Open the file, check that it is ours (or empty) and bring its schema up to date."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self._where}: cannot create its directory: {exc}") from exc
        try:
            db = sqlite3.connect(
                str(self.path),
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout_ms / 1000,
            )
        except sqlite3.Error as exc:
            raise self._error("opening the file", exc) from exc
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            # read only, so nothing is written to a database that is not ours; in one read
            # transaction, so the pragmas and the tables are one snapshot (another process may
            # be creating the schema right now)
            db.execute("BEGIN")
            try:
                self._check(db)
            finally:
                _rollback(db)
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._switch_to_wal(db)
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("BEGIN IMMEDIATE")
            try:
                version = self._check(db)  # again under the write lock: another process may
                if version < SCHEMA_VERSION:  # have created or migrated it meanwhile
                    if version == 0:
                        for statement in _V1_SCHEMA:
                            db.execute(statement)
                    if version <= 1:
                        for statement in _MIGRATE_1_TO_2:
                            db.execute(statement)
                    if version <= 2:
                        for statement in _MIGRATE_2_TO_3:
                            db.execute(statement)
                    for statement in _MIGRATE_3_TO_4:
                        db.execute(statement)
                    self._fill_derived(db)
                    for statement in REBUILD_TOTALS:
                        db.execute(statement)
                    for statement in _SEARCH_INDEX:
                        db.execute(statement)
                    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute(_QUEUED_INDEX)
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
        except StoreError:
            db.close()
            raise
        except sqlite3.Error as exc:
            db.close()
            raise self._error("opening the store", exc) from exc
        return db

    def _switch_to_wal(self, db: sqlite3.Connection) -> None:
        """Set the WAL journal, retrying while another connection holds the file's lock.

        SQLite can refuse the switch with ``SQLITE_BUSY`` at once, without calling the busy
        handler (several processes opening one new file at the same moment), so the wait that
        ``busy_timeout`` gives every other statement is done here, with the same deadline.
        """
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        pause = 0.001
        while True:
            try:
                db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _check(self, db: sqlite3.Connection) -> int:
        """The file's schema version: 0 empty, 1 first release, 2, 3 (the admission queue), 4
        current; else `StoreError`."""
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        objects = db.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        tables = {
            name: [c[1] for c in db.execute("SELECT * FROM pragma_table_info(?)", (name,))]
            for kind, name in objects
            if kind == "table"
        }
        if app_id == APPLICATION_ID:
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self._where}: the file holds schema version {version}, newer than this "
                    f"asyncagents understands ({SCHEMA_VERSION}); upgrade asyncagents or use "
                    "another file"
                )
            if version == SCHEMA_VERSION and tables == _CURRENT_TABLES:
                return SCHEMA_VERSION
            if version == 3 and tables == _V3_TABLES:
                return 3
            if version == 2 and tables == _V2_TABLES:
                return 2
        elif app_id == 0 and version == 0:
            if not objects:
                return 0
            if tables == _V1_TABLES and {k for k, _ in objects} <= {"table", "index"}:
                return 1
        names = ", ".join(sorted(name for _, name in objects)) or "none"
        raise StoreError(
            f"{self._where}: the file is not an asyncagents task store (application_id "
            f"{app_id}, user_version {version}, objects: {names}); it was left untouched. "
            "Use another file for the task store."
        )

    # --- tasks -----------------------------------------------------------------------------------

    async def open(self) -> None:
        await self._run("opening the store", lambda db: None)

    async def close(self) -> None:
        def close() -> None:
            with self._lock:
                db, self._db = self._db, None
                if db is not None:
                    try:
                        db.close()
                    except sqlite3.Error as exc:
                        raise self._error("closing the file", exc) from exc

        await asyncio.to_thread(close)

    def _task(self, row: Sequence[Any]) -> Task | None:
        return load_task(self._where, row[0], row[1], row[2], row[3])

    def _tasks(self, rows: list[Any]) -> list[Task]:
        return [t for t in map(self._task, rows) if t is not None]

    @staticmethod
    def _task_values(task: Task) -> tuple[Any, ...]:
        return (
            task.parent_session_id,
            task.session_id,
            task.status.value,
            task.created_at,
            _json(task),
            task.backend,
            task.owner,
            task.model,
            1 if task.ready else 0,
            *derived(task),
            task.id,
        )

    @staticmethod
    def _save_footprint(
        db: sqlite3.Connection, task: Task, before: Footprint | None, *, totals: bool = True
    ) -> Deltas:
        """Keep the task's tool and model rows (``task_tools``, ``task_models``) and, with
        `totals`, the running totals (``task_counts``, ``tool_totals``, ``usage_totals``) as the
        task now says; `before` is its footprint as stored until now (None: a new task).
        Returns the change of the totals (without `totals`, for the caller to apply)."""
        after = Footprint.of(task)
        if before is None or before[2] != after[2]:
            if before is not None:
                db.execute("DELETE FROM task_tools WHERE task_id = ?", (task.id,))
            db.executemany(
                "INSERT INTO task_tools (task_id, backend, parent_session_id, tool, calls) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (task.id, task.backend, task.parent_session_id, name, calls)
                    for name, calls in task.progress.tools.items()
                ],
            )
        if before is None or before[3] != after[3]:
            if before is not None:
                db.execute("DELETE FROM task_models WHERE task_id = ?", (task.id,))
            backend, parent, _, models = after[3]
            db.executemany(
                INSERT_MODEL.format(p="?"),
                [(task.id, backend, parent, model, *used) for model, used in models],
            )
        deltas = total_deltas(before, after)
        if totals:
            _add_totals(db, deltas)
        return deltas

    @staticmethod
    def _save_task(
        db: sqlite3.Connection, task: Task, before: Footprint | None, *, totals: bool = True
    ) -> Deltas:
        """Write a stored task's row, its tool and model rows and (with `totals`) the running
        totals; returns the totals' change."""
        db.execute(f"UPDATE tasks SET {_UPDATED} WHERE id = ?", SQLiteTaskStore._task_values(task))
        return SQLiteTaskStore._save_footprint(db, task, before, totals=totals)

    def _fill_derived(self, db: sqlite3.Connection) -> None:
        """Migration to version 4: the derived columns, tool rows and model rows of every stored
        task."""
        db.execute("UPDATE tasks SET updated_at = created_at, root_session_id = parent_session_id")
        for row in db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks").fetchall():
            task = self._task(row)
            if task is None:
                continue  # keeps the columns it has (its agent: version 3's)
            db.execute(
                f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in DERIVED_COLUMNS)} WHERE id = ?",
                (*derived(task), task.id),
            )
            self._save_footprint(db, task, None, totals=False)

    @staticmethod
    def _save_notice(db: sqlite3.Connection, notice: Notice) -> None:
        db.execute(
            "INSERT OR REPLACE INTO notices (parent_session_id, created_at, data, backend, "
            "claimed_by, claim_expires_at, next_attempt_at, id) "
            "VALUES (?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?)",
            (
                notice.parent_session_id,
                notice.created_at,
                _json(notice),
                notice.backend,
                notice.claimed_by,
                notice.claim_expires_at,
                notice.next_attempt_at,
                notice.id,
            ),
        )

    async def insert(self, task: Task) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                f"INSERT INTO tasks ({_WRITTEN}, id) VALUES ({_PLACES}, ?)",
                self._task_values(task),
            )
            self._save_footprint(db, task, None)

        await self._write(f"inserting task {task.id}", work)

    async def get(self, task_id: str) -> Task | None:
        def work(db: sqlite3.Connection) -> Task | None:
            row = db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
            found = row.fetchone()
            return None if found is None else self._task(found)

        return await self._run(f"reading task {task_id}", work)

    async def ids_with_prefix(
        self, prefix: str, parent_session_id: str | None = None, limit: int = 2
    ) -> list[str]:
        sql = "SELECT id FROM tasks WHERE substr(id, 1, ?) = ?"
        args: list[Any] = [len(prefix), prefix]
        if parent_session_id is not None:
            sql += " AND parent_session_id = ?"
            args.append(parent_session_id)
        args.append(max(limit, 0))
        return await self._run(
            "looking up task ids",
            lambda db: [r[0] for r in db.execute(sql + " ORDER BY id LIMIT ?", args)],
        )

    async def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        def work(db: sqlite3.Connection) -> tuple[Task, Notice | None] | None:
            row = db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
            found = row.fetchone()
            task = None if found is None else self._task(found)
            before = None if task is None else Footprint.of(task)
            out = None if task is None else mutate(task)
            if out is None:
                return None
            new, notice = out
            self._save_task(db, new, before)
            if notice is not None:
                self._save_notice(db, notice)
            return new, notice

        return await self._write(f"updating task {task_id}", work)

    async def list_tasks(
        self,
        parent_session_id: str | None = None,
        statuses: Collection[TaskStatus] | None = None,
        *,
        backend: str | None = None,
        owner: str | None = None,
    ) -> list[Task]:
        # a backend's active tasks (a manager's periodic checks) are few among many ended
        # ones: read them through the status index, not the one that gives the order
        hint = (
            " INDEXED BY tasks_backend_status"
            if backend is not None and statuses is not None and parent_session_id is None
            else ""
        )
        sql = f"SELECT {_TASK_COLUMNS} FROM tasks{hint} WHERE 1 = 1"
        args: list[Any] = []
        for column, value in (
            ("parent_session_id", parent_session_id),
            ("backend", backend),
            ("owner", owner),
        ):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if statuses is not None:
            values = sorted({s.value for s in statuses})
            if not values:
                return []
            sql += f" AND status IN ({', '.join('?' * len(values))})"
            args.extend(values)
        sql += " ORDER BY created_at DESC, id DESC"
        return await self._run(
            "listing tasks", lambda db: self._tasks(db.execute(sql, args).fetchall())
        )

    async def find_by_session(self, session_id: str) -> Task | None:
        def work(db: sqlite3.Connection) -> Task | None:
            row = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE session_id = ? "
                "ORDER BY created_at DESC, id DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            return None if row is None else self._task(row)

        return await self._run(f"finding the task of session {session_id}", work)

    async def delete_parent(self, parent_session_id: str, backend: str | None = None) -> list[Task]:
        where, args = "parent_session_id = ?", [parent_session_id]
        if backend is not None:
            where, args = where + " AND backend = ?", [*args, backend]

        def work(db: sqlite3.Connection) -> list[Task]:
            rows = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {where} "
                "ORDER BY created_at DESC, id DESC",
                args,
            ).fetchall()
            _remove_totals(db, where, where, args)
            db.execute(f"DELETE FROM tasks WHERE {where}", args)
            db.execute(f"DELETE FROM notices WHERE {where}", args)
            db.execute(f"DELETE FROM queue_turns WHERE {where}", args)
            _cleared(db, rows)
            return self._tasks(rows)

        return await self._write(f"deleting the tasks of parent {parent_session_id}", work)

    # --- queries ---------------------------------------------------------------------------------

    async def query_tasks(self, query: TaskQuery) -> TaskPage:
        if query.matches_nothing:
            return query.empty_page()
        where = ["backend = ?"]
        args: list[Any] = [query.backend]
        if query.parent_session_id is not None:
            where.append("parent_session_id = ?")
            args.append(query.parent_session_id)
        if query.statuses is not None:
            values = sorted(s.value for s in query.statuses)
            where.append(f"status IN ({', '.join('?' * len(values))})")
            args.extend(values)
        if query.agent is not None:
            where.append("agent = ?")
            args.append(query.agent)
        if query.text:
            needle = query.text.casefold()
            if len(needle) >= _INDEXED_SEARCH:
                # the index's LIKE finds candidates (``%`` and ``_`` in the needle only widen
                # it); ``instr`` keeps the exact matches
                where.append("rowid IN (SELECT rowid FROM task_search WHERE search LIKE ?)")
                args.append(f"%{needle}%")
            where.append("instr(search, ?) > 0")
            args.append(needle)
        column = _SORTS[query.sort]
        order = "DESC" if query.descending else "ASC"
        page_where, page_args = list(where), list(args)
        if query.after is not None:
            page_where.append(f"({column}, id) {'<' if query.descending else '>'} (?, ?)")
            page_args.extend(query.after)
        sql = (
            f"SELECT {_TASK_COLUMNS}, {column} FROM tasks WHERE {' AND '.join(page_where)} "
            f"ORDER BY {column} {order}, id {order} LIMIT ?"
        )

        def work(db: sqlite3.Connection) -> TaskPage:
            rows = db.execute(sql, [*page_args, query.limit + 1]).fetchall()
            more = len(rows) > query.limit
            rows = rows[: query.limit]
            total = usage = None
            if query.count:
                count_sql, count_args = count_query(query, where, args, "?")
                total, usage = counted_page(db.execute(count_sql, count_args).fetchone())
            last = rows[-1] if rows and more else None
            return TaskPage(
                tasks=self._tasks(rows),
                total=total,
                usage=usage,
                next_after=None if last is None else (int(last[4]), str(last[0])),
            )

        return await self._run("querying tasks", work)

    async def task_stats(
        self, backend: str, parent_session_id: str | None = None, top: int = TOP_DEFAULT
    ) -> TaskStats:
        if has_nul(backend, parent_session_id):
            return stats_of([])
        if parent_session_id is not None:
            return await self._run(
                "counting tasks", lambda db: _parent_stats(db, backend, parent_session_id, top)
            )

        def work(db: sqlite3.Connection) -> TaskStats:
            counts = db.execute(TOTAL_COUNTS.format(p="?"), (backend,)).fetchall()
            tools = db.execute(
                "SELECT tool, calls FROM tool_totals WHERE backend = ? AND calls != 0", (backend,)
            ).fetchall()
            timed = sum(r[4] for r in counts)
            durations = DurationSummary()
            if timed:
                index = "FROM tasks WHERE backend = ? AND duration_ms IS NOT NULL"

                def ranked(rank: int) -> int:
                    # walk the index from the nearer end
                    order, skip = ("", rank - 1) if rank <= timed // 2 else ("DESC", timed - rank)
                    row = db.execute(
                        f"SELECT duration_ms {index} ORDER BY duration_ms {order} LIMIT 1 OFFSET ?",
                        (backend, skip),
                    ).fetchone()
                    return int(row[0])

                lo, hi = median_ranks(timed)
                middle = db.execute(
                    f"SELECT duration_ms {index} ORDER BY duration_ms LIMIT ? OFFSET ?",
                    (backend, hi - lo + 1, lo - 1),
                ).fetchall()
                low, high = int(middle[0][0]), int(middle[-1][0])
                durations = DurationSummary(
                    count=timed,
                    min_ms=ranked(1),
                    median_ms=low if lo == hi else (low + high) / 2,
                    p95_ms=ranked(percentile_rank(timed, 0.95)),
                    max_ms=ranked(timed),
                )
            usage = db.execute(TOTAL_USAGE.format(p="?"), (backend,)).fetchall()
            for kind in ("parent", "tree"):
                usage += db.execute(TOP_USAGE.format(p="?", c=""), (backend, kind, top)).fetchall()
            keys = db.execute(KEY_COUNTS.format(p="?"), (backend,)).fetchall()
            return stats_from(counts, tools, durations, usage, top, keys)

        return await self._run("counting tasks", work)

    async def changed_since(self, backend: str, since: int) -> TaskChanges:
        if has_nul(backend):
            return TaskChanges(tasks=[], cleared=[])

        def work(db: sqlite3.Connection) -> TaskChanges:
            rows = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE backend = ? AND updated_at >= ? "
                "ORDER BY updated_at, id",
                (backend, since),
            ).fetchall()
            cleared = db.execute(
                "SELECT id FROM cleared WHERE backend = ? AND cleared_at >= ? "
                "ORDER BY cleared_at, id",
                (backend, since),
            ).fetchall()
            return TaskChanges(tasks=self._tasks(rows), cleared=[r[0] for r in cleared])

        return await self._run("reading changed tasks", work)

    # --- ownership -------------------------------------------------------------------------------

    async def renew_lease(self, owner: str, backend: str, ttl: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO leases (owner, backend, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT(owner) DO UPDATE SET backend = excluded.backend, "
                "expires_at = excluded.expires_at",
                (owner, backend, now_ms() + seconds_to_ms(ttl)),
            )

        await self._write(f"renewing the lease of {owner}", work)

    async def drop_lease(self, owner: str) -> None:
        await self._write(
            f"dropping the lease of {owner}", _exec("DELETE FROM leases WHERE owner = ?", owner)
        )

    async def take_over(self, owner: str, backend: str, limit: int = 500) -> list[Task]:
        def work(db: sqlite3.Connection) -> list[Task]:
            rows = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks INDEXED BY tasks_backend_status "
                "WHERE backend = ? AND status IN (?, ?, ?) "
                "AND (owner IS NULL OR owner != ?) AND NOT EXISTS (SELECT 1 FROM leases "
                "WHERE leases.owner = tasks.owner AND leases.expires_at > ?) "
                "ORDER BY created_at, id LIMIT ?",
                (backend, *_PENDING, owner, now_ms(), max(limit, 0)),
            ).fetchall()
            # broken rows are taken too (and skipped in the answer), so they never fill `limit`
            db.executemany("UPDATE tasks SET owner = ? WHERE id = ?", [(owner, r[0]) for r in rows])
            return self._tasks([(r[0], r[1], r[2], owner) for r in rows])

        return await self._write(f"taking over tasks of backend {backend!r} for {owner}", work)

    # --- admission -------------------------------------------------------------------------------

    @staticmethod
    def _queue_view(db: sqlite3.Connection, backend: str) -> QueueView:
        rows = db.execute(
            "SELECT id, parent_session_id, status, created_at, agent, model, ready, owner, "
            "EXISTS (SELECT 1 FROM leases l WHERE l.owner = tasks.owner AND l.expires_at > ?), "
            # the pending tasks are few among many ended ones: through the status index (with a
            # store's statistics, the planner may think a scan of every task cheaper)
            f"{_NOT_BEFORE} FROM tasks INDEXED BY tasks_backend_status "
            "WHERE backend = ? AND status IN (?, ?, ?)",
            (now_ms(), backend, *_PENDING),
        ).fetchall()
        entries = [
            Entry(
                id=r[0],
                parent=r[1],
                agent=r[4],
                model=r[5],
                created_at=r[3],
                running=r[2] != TaskStatus.QUEUED.value,
                ready=bool(r[6]),
                owner=r[7],
                owner_live=bool(r[8]),
                not_before=r[9] if isinstance(r[9], int) else None,
            )
            for r in rows
        ]
        turns = db.execute(
            "SELECT parent_session_id, admitted_at FROM queue_turns WHERE backend = ?", (backend,)
        ).fetchall()
        return QueueView(entries=entries, last_admitted={r[0]: r[1] for r in turns})

    async def queue_view(self, backend: str) -> QueueView:
        return await self._run(
            f"reading the queue of backend {backend!r}", lambda db: self._queue_view(db, backend)
        )

    async def tree_costs(self, parent_session_ids: Collection[str]) -> list[TaskCost]:
        parents = [p for p in dict.fromkeys(parent_session_ids) if not has_nul(p)]

        def work(db: sqlite3.Connection) -> list[TaskCost]:
            out: list[TaskCost] = []
            for start in range(0, len(parents), 500):  # within SQLite's bound on parameters
                chunk = parents[start : start + 500]
                rows = db.execute(
                    "SELECT id, session_id, cost FROM tasks WHERE parent_session_id IN "
                    f"({', '.join('?' * len(chunk))})",
                    chunk,
                )
                out.extend(TaskCost(r[0], r[1], float(r[2])) for r in rows)
            return out

        return await self._run("reading the costs of a tree of tasks", work)

    async def queued_ahead(self, task: Task) -> int:
        if has_nul(task.backend, task.parent_session_id, task.id):
            return 0

        def work(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT count(*) FROM tasks INDEXED BY tasks_queued WHERE backend = ? AND "
                "parent_session_id = ? AND status = 'queued' AND (created_at, id) < (?, ?)",
                (task.backend, task.parent_session_id, task.created_at, task.id),
            ).fetchone()
            return int(row[0])

        return await self._run(f"counting the queue before task {task.id}", work)

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
        def work(db: sqlite3.Connection) -> list[Task]:
            view = self._queue_view(db, backend)
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
            out: list[Task] = []
            changes: list[Deltas] = []
            for entry, key in zip(
                chosen, turn_keys(now, len(chosen), view.last_admitted), strict=True
            ):
                row = db.execute(
                    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (entry.id,)
                ).fetchone()
                task = None if row is None else self._task(row)
                if task is None:
                    continue
                before = Footprint.of(task)  # `admitted` may change the task it is given
                changed = admitted(task, owner, now, include)
                if changed is None:
                    continue
                changes.append(self._save_task(db, changed, before, totals=False))
                db.execute(
                    "INSERT INTO queue_turns (backend, parent_session_id, admitted_at) "
                    "VALUES (?, ?, ?) ON CONFLICT (backend, parent_session_id) "
                    "DO UPDATE SET admitted_at = excluded.admitted_at",
                    (backend, entry.parent, key),
                )
                out.append(changed)
            _add_totals(db, merged(changes))
            return out

        def anything(db: sqlite3.Connection) -> bool:
            view = self._queue_view(db, backend)
            return bool(
                choose(
                    view.entries,
                    view.last_admitted,
                    caps,
                    1,
                    include=include,
                    me=owner,
                    now=now_ms(),
                    fresh_ms=fresh_ms,
                )
            )

        def look_then_admit(db: sqlite3.Connection) -> list[Task]:
            # a look without the write lock first: most passes at saturation find nothing to
            # start, and need not queue for the lock every other process wants (the locked pass
            # decides); both in one trip to the store's thread
            return _in_transaction(db, work) if anything(db) else []

        return await self._run(f"admitting queued tasks of backend {backend!r}", look_then_admit)

    async def delete_queued(self, task_id: str) -> Task | None:
        def work(db: sqlite3.Connection) -> Task | None:
            row = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ? AND status = ?",
                (task_id, TaskStatus.QUEUED.value),
            ).fetchone()
            if row is None:
                return None
            _remove_totals(db, "id = ?", "task_id = ?", (task_id,))
            db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            _cleared(db, [row])
            db.execute("DELETE FROM notices WHERE json_valid(data) AND "
                       "json_extract(data, '$.task_id') = ?", (task_id,))  # fmt: skip
            return self._task(row)

        return await self._write(f"deleting queued task {task_id}", work)

    async def descendants(self, session_id: str) -> list[Task]:
        def work(db: sqlite3.Connection) -> list[Task]:
            rows = db.execute(
                "WITH RECURSIVE tree(id, session_id) AS ("
                "SELECT id, session_id FROM tasks WHERE parent_session_id = ? UNION "
                "SELECT t.id, t.session_id FROM tasks t JOIN tree "
                "ON t.parent_session_id = tree.session_id) "
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id IN (SELECT id FROM tree) "
                "ORDER BY created_at, id",
                (session_id,),
            ).fetchall()
            return self._tasks(rows)

        return await self._run(f"reading the task tree of session {session_id}", work)

    # --- notices ---------------------------------------------------------------------------------

    def _notices(self, rows: list[Any]) -> list[Notice]:
        loaded = (load_notice(self._where, *row) for row in rows)
        return [n for n in loaded if n is not None]

    async def notices(
        self, parent_session_id: str | None = None, *, backend: str | None = None
    ) -> list[Notice]:
        sql = f"SELECT {_NOTICE_COLUMNS} FROM notices WHERE 1 = 1"
        args: list[Any] = []
        for column, value in (("parent_session_id", parent_session_id), ("backend", backend)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " ORDER BY created_at, id"
        return await self._run(
            "listing notices", lambda db: self._notices(db.execute(sql, args).fetchall())
        )

    async def claim_notices(
        self,
        owner: str,
        backend: str,
        claim_ttl: float,
        *,
        parent_session_id: str | None = None,
        limit: int = 100,
    ) -> list[Notice]:
        def work(db: sqlite3.Connection) -> list[Notice]:
            now = now_ms()
            expires = now + seconds_to_ms(claim_ttl)
            sql = (
                f"SELECT {_NOTICE_COLUMNS} FROM notices WHERE backend = ? "
                "AND next_attempt_at <= ? AND (claimed_by IS NULL OR claim_expires_at <= ?)"
            )
            args: list[Any] = [backend, now, now]
            if parent_session_id is not None:
                sql += " AND parent_session_id = ?"
                args.append(parent_session_id)
            args.append(max(limit, 0))
            rows = db.execute(sql + " ORDER BY created_at, id LIMIT ?", args).fetchall()
            db.executemany(
                "UPDATE notices SET claimed_by = ?, claim_expires_at = ? WHERE id = ?",
                [(owner, expires, r[0]) for r in rows],
            )
            return self._notices([(*r[:3], owner, expires, r[5]) for r in rows])

        return await self._write(f"claiming notices of backend {backend!r} for {owner}", work)

    async def release_notice(self, notice: Notice) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE notices SET data = CAST(? AS TEXT), next_attempt_at = ?, "
                "claimed_by = NULL, claim_expires_at = NULL WHERE id = ? AND claimed_by IS ?",
                (
                    _json(notice.model_copy(update={"claimed_by": None, "claim_expires_at": None})),
                    notice.next_attempt_at,
                    notice.id,
                    notice.claimed_by,
                ),
            )

        await self._write(f"releasing notice {notice.id}", work)

    async def delete_notice(self, notice_id: str) -> None:
        await self._write(
            f"deleting notice {notice_id}", _exec("DELETE FROM notices WHERE id = ?", notice_id)
        )
