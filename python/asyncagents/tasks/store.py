"""Where tasks and undelivered notices live: SQLite for real use, a dict for tests.

A store call is short and synchronous; every change of a task goes through `update`, a
read-modify-write inside one transaction, so concurrent writers (coroutines, threads, or other
processes on the same SQLite file) never see or leave a torn record, and a state transition and
the notice it produces are saved together or not at all.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from .models import Notice, Task, TaskStatus

#: `update`'s callback: the new task and an optional notice to save with it, or None to skip
Mutation = Callable[[Task], "tuple[Task, Notice | None] | None"]


class TaskStore(Protocol):
    """Persistence of tasks and pending notices (see module docstring for the guarantees)."""

    def put(self, task: Task) -> None:
        """Insert or replace a task."""

    def get(self, task_id: str) -> Task | None:
        """The task, or None."""

    def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        """Atomically apply `mutate` to the stored task; None if absent or `mutate` declined."""

    def list_tasks(
        self, parent_session_id: str | None = None, statuses: Collection[TaskStatus] | None = None
    ) -> list[Task]:
        """Tasks, newest first, optionally of one parent and/or some statuses."""

    def find_by_session(self, session_id: str) -> Task | None:
        """The task whose child session is `session_id`."""

    def delete_parent(self, parent_session_id: str) -> list[Task]:
        """Remove every task and pending notice of a parent; return the removed tasks."""

    def save_notice(self, notice: Notice) -> None:
        """Insert or replace a pending notice."""

    def notices(self, parent_session_id: str | None = None) -> list[Notice]:
        """Pending notices, oldest first; only those for `parent_session_id` when given."""

    def get_notice(self, notice_id: str) -> Notice | None:
        """One pending notice, or None once delivered or dropped."""

    def delete_notice(self, notice_id: str) -> None:
        """Forget a delivered (or undeliverable) notice."""

    def close(self) -> None:
        """Release resources."""


class InMemoryTaskStore:
    """A dict-backed `TaskStore` for tests and throwaway managers; copies on the way in and out."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tasks: dict[str, Task] = {}
        self._notices: dict[str, Notice] = {}

    def put(self, task: Task) -> None:
        with self._lock:
            self._tasks[task.id] = task.model_copy(deep=True)

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return None if task is None else task.model_copy(deep=True)

    def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            out = mutate(task.model_copy(deep=True))
            if out is None:
                return None
            new, notice = out
            self._tasks[task_id] = new.model_copy(deep=True)
            if notice is not None:
                self._notices[notice.id] = notice.model_copy()
            return new, notice

    def list_tasks(
        self, parent_session_id: str | None = None, statuses: Collection[TaskStatus] | None = None
    ) -> list[Task]:
        with self._lock:
            tasks = [
                t.model_copy(deep=True)
                for t in self._tasks.values()
                if (parent_session_id is None or t.parent_session_id == parent_session_id)
                and (statuses is None or t.status in statuses)
            ]
        tasks.sort(key=lambda t: (t.created_at, t.id), reverse=True)
        return tasks

    def find_by_session(self, session_id: str) -> Task | None:
        with self._lock:
            for task in self._tasks.values():
                if task.session_id == session_id:
                    return task.model_copy(deep=True)
        return None

    def delete_parent(self, parent_session_id: str) -> list[Task]:
        with self._lock:
            gone = [t for t in self._tasks.values() if t.parent_session_id == parent_session_id]
            for task in gone:
                del self._tasks[task.id]
            for notice in list(self._notices.values()):
                if notice.parent_session_id == parent_session_id:
                    del self._notices[notice.id]
        return gone

    def save_notice(self, notice: Notice) -> None:
        with self._lock:
            self._notices[notice.id] = notice.model_copy()

    def notices(self, parent_session_id: str | None = None) -> list[Notice]:
        # a Notice holds only immutable scalars: a shallow copy is a full one
        with self._lock:
            out = [
                n.model_copy()
                for n in self._notices.values()
                if parent_session_id is None or n.parent_session_id == parent_session_id
            ]
        out.sort(key=lambda n: (n.created_at, n.id))
        return out

    def get_notice(self, notice_id: str) -> Notice | None:
        with self._lock:
            notice = self._notices.get(notice_id)
            return None if notice is None else notice.model_copy()

    def delete_notice(self, notice_id: str) -> None:
        with self._lock:
            self._notices.pop(notice_id, None)

    def close(self) -> None:
        return None


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
