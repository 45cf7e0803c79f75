"""Legacy synchronous SQLite store (being replaced by the async one).

A store call is short and synchronous; every change of a task goes through `update`, a
read-modify-write inside one transaction, so concurrent writers (coroutines, threads, or other
processes on the same SQLite file) never see or leave a torn record, and a state transition and
the notice it produces are saved together or not at all.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..models import Notice, Task, TaskStatus
from .base import Mutation

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    parent_session_id TEXT NOT NULL,
    session_id TEXT,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_parent ON tasks (parent_session_id, created_at);
CREATE INDEX IF NOT EXISTS tasks_session ON tasks (session_id);
CREATE INDEX IF NOT EXISTS tasks_status ON tasks (status);
CREATE TABLE IF NOT EXISTS notices (
    id TEXT PRIMARY KEY,
    parent_session_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS notices_parent ON notices (parent_session_id, created_at);
"""


class SQLiteTaskStore:
    """A `TaskStore` in one SQLite file (stdlib ``sqlite3``, WAL journal).

    One row per task holding its JSON, written in ``BEGIN IMMEDIATE`` transactions: a write is
    all or nothing, and writers from other threads or processes wait (``busy_timeout``) instead
    of interleaving. A restarted manager on the same file sees every task and pending notice.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=30
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._write() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with the write lock up front (no upgrade deadlocks)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _put(self, db: sqlite3.Connection, task: Task) -> None:
        db.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "parent_session_id = excluded.parent_session_id, session_id = excluded.session_id, "
            "status = excluded.status, created_at = excluded.created_at, data = excluded.data",
            (
                task.id,
                task.parent_session_id,
                task.session_id,
                task.status.value,
                task.created_at,
                task.model_dump_json(),
            ),
        )

    def _put_notice(self, db: sqlite3.Connection, notice: Notice) -> None:
        db.execute(
            "INSERT OR REPLACE INTO notices (id, parent_session_id, created_at, data) "
            "VALUES (?, ?, ?, ?)",
            (notice.id, notice.parent_session_id, notice.created_at, notice.model_dump_json()),
        )

    def put(self, task: Task) -> None:
        with self._write() as db:
            self._put(db, task)

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else Task.model_validate_json(row[0])

    def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        with self._write() as db:
            row = db.execute("SELECT data FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                return None
            out = mutate(Task.model_validate_json(row[0]))
            if out is None:
                return None
            new, notice = out
            self._put(db, new)
            if notice is not None:
                self._put_notice(db, notice)
            return new, notice

    def list_tasks(
        self, parent_session_id: str | None = None, statuses: Collection[TaskStatus] | None = None
    ) -> list[Task]:
        sql = "SELECT data FROM tasks WHERE 1 = 1"
        args: list[str] = []
        if parent_session_id is not None:
            sql += " AND parent_session_id = ?"
            args.append(parent_session_id)
        if statuses is not None:
            values = [s.value for s in statuses]
            if not values:
                return []
            sql += f" AND status IN ({', '.join('?' * len(values))})"
            args.extend(values)
        sql += " ORDER BY created_at DESC, id DESC"
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [Task.model_validate_json(r[0]) for r in rows]

    def find_by_session(self, session_id: str) -> Task | None:
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM tasks WHERE session_id = ? ORDER BY created_at DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        return None if row is None else Task.model_validate_json(row[0])

    def delete_parent(self, parent_session_id: str) -> list[Task]:
        with self._write() as db:
            rows = db.execute(
                "SELECT data FROM tasks WHERE parent_session_id = ?", (parent_session_id,)
            ).fetchall()
            db.execute("DELETE FROM tasks WHERE parent_session_id = ?", (parent_session_id,))
            db.execute("DELETE FROM notices WHERE parent_session_id = ?", (parent_session_id,))
        return [Task.model_validate_json(r[0]) for r in rows]

    def save_notice(self, notice: Notice) -> None:
        with self._write() as db:
            self._put_notice(db, notice)

    def notices(self, parent_session_id: str | None = None) -> list[Notice]:
        sql, args = "SELECT data FROM notices", []
        if parent_session_id is not None:
            sql, args = sql + " WHERE parent_session_id = ?", [parent_session_id]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at, id", args).fetchall()
        return [Notice.model_validate_json(r[0]) for r in rows]

    def get_notice(self, notice_id: str) -> Notice | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM notices WHERE id = ?", (notice_id,)).fetchone()
        return None if row is None else Notice.model_validate_json(row[0])

    def delete_notice(self, notice_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM notices WHERE id = ?", (notice_id,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
