"""SQLite store faults: full disk, read-only places, corrupt and foreign files, garbage rows, the
first release's layout, and a 50 MB record that must not stall the event loop.

Root ignores file permissions, so as root (CI) the read-only cases use a read-only tmpfs mount;
without root they use ``chmod``. Running out of space is tested twice: a full 512 KiB tmpfs (where
mounting is permitted) and a per-file size limit (everywhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import resource
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from asyncagents.tasks import StoreError
from asyncagents.tasks.models import Notice, NoticeKind, Task, TaskProgress, TaskStatus, now_ms
from asyncagents.tasks.store import SQLiteTaskStore
from asyncagents.tasks.store import sqlite as sqlite_module
from asyncagents.tasks.store.sqlite import APPLICATION_ID, SCHEMA_VERSION
from store_records import make_notice, make_task

IS_ROOT = os.geteuid() == 0


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"mount {' '.join(args)} failed: {done.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def _can_mount() -> bool:
    if not IS_ROOT:
        return False
    probe = Path(tempfile.mkdtemp(prefix="asyncagents-mount-"))
    try:
        with tmpfs(probe, "64k"):
            return True
    except OSError:
        return False
    finally:
        probe.rmdir()


CAN_MOUNT = _can_mount()
NO_MOUNT = "mount is not permitted here (not root, or a container without CAP_SYS_ADMIN)"


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make the directory `path` read-only for this process (a remount as root, else chmod)."""
    if IS_ROOT:
        _mount("-o", "remount,ro", str(path))
        try:
            yield
        finally:
            _mount("-o", "remount,rw", str(path))
    else:
        mode = path.stat().st_mode
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(mode)


@pytest.fixture
def small_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own small filesystem (tmpfs) as root, a plain one otherwise."""
    if not IS_ROOT:
        yield tmp_path
        return
    if not CAN_MOUNT:  # root ignores permissions: only a read-only mount is faithful
        pytest.skip(f"{NO_MOUNT}; as root nothing else makes a directory read-only")
    with tmpfs(tmp_path / "mnt", "512k") as mnt:
        yield mnt


def snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


# --- full disk -----------------------------------------------------------------------------------


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """A per-file size limit (writes past it fail with EFBIG): running out of space in one file."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.mark.parametrize("fault", ["full_tmpfs", "file_size_limit"])
async def test_out_of_space_raises_store_error_loses_nothing_and_recovers(
    tmp_path: Path, fault: str
) -> None:
    if fault == "full_tmpfs" and not CAN_MOUNT:
        pytest.skip(f"{NO_MOUNT}; the file_size_limit case runs out of space instead")
    with ExitStack() as stack:
        where = (
            stack.enter_context(tmpfs(tmp_path / "mnt", "1m"))
            if fault == "full_tmpfs"
            else tmp_path
        )
        path = where / "tasks.db"
        filler = where / "filler"
        filler.write_bytes(b"\0" * 256 * 1024)  # more than a write needs (about 100 KiB)
        store = SQLiteTaskStore(path)
        await store.open()
        stored: list[Task] = []
        failed: Task | None = None
        with file_size_limit(600 * 1024) if fault == "file_size_limit" else nullcontext():
            for i in range(400):
                task = make_task(f"tsk_full_{i:04d}")
                task.prompt = f"{i} " + "p" * 20_000
                try:
                    await store.insert(task)
                except StoreError as exc:
                    failed, message = task, str(exc)
                    break
                stored.append(task)
            assert failed is not None, "the space never ran out"
            assert message.startswith(
                f"SQLite task store {path}: inserting task {failed.id} failed: "
            )
            if fault == "full_tmpfs":
                assert message.endswith("database or disk is full")
            # what was stored is intact and readable; the failed write left nothing behind
            assert await store.get(failed.id) is None
            assert [t.id for t in await store.list_tasks()] == [t.id for t in reversed(stored)]
            grow = stored[0].model_copy(update={"prompt": "q" * 400_000})
            with pytest.raises(StoreError):
                await store.update(stored[0].id, lambda t: (grow, None))
            assert (await store.get(stored[0].id)) == stored[0]
        # space freed (or the limit lifted): the same store, same connection, works again
        filler.unlink()
        await store.update(stored[0].id, lambda t: (t.model_copy(update={"prompt": "short"}), None))
        await store.insert(failed)
        assert (await store.get(failed.id)) == failed
        assert len(await store.list_tasks()) == len(stored) + 1
        await store.close()


# --- read-only places ----------------------------------------------------------------------------


async def test_read_only_store_directory_raises_store_error_naming_the_file(
    small_dir: Path,
) -> None:
    small_dir.mkdir(exist_ok=True)
    existing = small_dir / "tasks.db"
    store = SQLiteTaskStore(existing)
    await store.insert(make_task("tsk_before"))
    await store.close()
    with read_only(small_dir):
        for path in (existing, small_dir / "new.db", small_dir / "sub" / "new.db"):
            with pytest.raises(StoreError) as err:
                await SQLiteTaskStore(path).open()
            assert str(path) in str(err.value)
        assert "cannot create its directory" in str(err.value)
        assert "Read-only file system" in str(err.value) or "Permission denied" in str(err.value)
    # nothing was lost on the way
    again = SQLiteTaskStore(existing)
    assert [t.id for t in await again.list_tasks()] == ["tsk_before"]
    await again.close()


async def test_store_that_becomes_read_only_fails_writes_with_store_error(
    small_dir: Path,
) -> None:
    small_dir.mkdir(exist_ok=True)
    path = small_dir / "tasks.db"
    store = SQLiteTaskStore(path)
    await store.insert(make_task("tsk_1"))
    await store.close()
    path.chmod(0o444)
    try:
        with read_only(small_dir):
            with pytest.raises(StoreError) as err:
                await store.open()
            assert str(path) in str(err.value)
            assert "sqlite3" not in type(err.value).__module__
    finally:
        path.chmod(0o644)


# --- corrupt and foreign files -------------------------------------------------------------------


async def test_a_file_that_is_not_a_database_raises_store_error_and_is_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    path.write_bytes(os.urandom(8192))
    before = snapshot(path)
    with pytest.raises(StoreError) as err:
        await SQLiteTaskStore(path).open()
    assert str(path) in str(err.value)
    assert "file is not a database" in str(err.value)
    assert snapshot(path) == before


async def test_damaged_pages_raise_store_error_not_a_raw_sqlite_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = SQLiteTaskStore(path)
    for i in range(200):
        await store.insert(make_task(f"tsk_{i:04d}"))
    await store.close()
    with sqlite3.connect(path) as db:  # fold the WAL into the main file first
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    data[page : len(data)] = os.urandom(len(data) - page)  # keep the header, wreck the rest
    path.write_bytes(bytes(data))
    store = SQLiteTaskStore(path)
    with pytest.raises(StoreError) as err:
        await store.open()
        await store.list_tasks()
    assert str(path) in str(err.value)
    assert "malformed" in str(err.value) or "not a database" in str(err.value)
    await store.close()


def _make_foreign(path: Path, kind: str) -> None:
    with sqlite3.connect(path) as db:
        if kind == "unrelated":
            db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
            db.execute("INSERT INTO users (name) VALUES ('ada')")
        elif kind == "other_application":
            db.execute("PRAGMA application_id = 1234")
            db.execute("CREATE TABLE tasks (id TEXT)")
        elif kind == "newer_version":
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
            db.execute("CREATE TABLE tasks (id TEXT)")
        elif kind == "v1_plus_other_table":
            for statement in _OLD_SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("CREATE TABLE extra (x)")
        elif kind == "view_only":
            db.execute("CREATE VIEW v AS SELECT 1")
    db.close()


@pytest.mark.parametrize(
    "kind", ["unrelated", "other_application", "newer_version", "v1_plus_other_table", "view_only"]
)
async def test_a_database_that_is_not_ours_is_refused_and_left_unmodified(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "other.db"
    _make_foreign(path, kind)
    old = time.time() - 3600
    os.utime(path, (old, old))
    before = snapshot(path)
    store = SQLiteTaskStore(path)
    with pytest.raises(StoreError) as err:
        await store.open()
    message = str(err.value)
    assert str(path) in message
    if kind == "newer_version":
        assert f"schema version {SCHEMA_VERSION + 1}, newer than" in message
    else:
        assert "is not an asyncagents task store" in message
        assert "left untouched" in message
    assert snapshot(path) == before  # same bytes, same mtime, no -wal/-shm files
    with pytest.raises(StoreError):
        await store.list_tasks()  # every later call refuses as well
    await store.close()


# --- garbage rows --------------------------------------------------------------------------------


async def test_rows_that_do_not_load_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tasks.db"
    store = SQLiteTaskStore(path)
    good = make_task("tsk_good", owner="dead", session_id="ses_x", created_at=1)
    await store.insert(good)
    good_notice = make_notice(good, created_at=1)
    await store.update(good.id, lambda t: (t, good_notice))
    with sqlite3.connect(path) as db:
        for task_id, data in (("tsk_junk", "{not json"), ("tsk_types", '{"id": 5, "turn": "x"}')):
            db.execute(
                "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
                "backend, owner) VALUES (?, 'ses_parent', 'ses_x', 'running', 9, ?, 'b1', 'dead')",
                (task_id, data),
            )
        db.execute(
            "INSERT INTO notices (id, parent_session_id, created_at, data, backend) "
            "VALUES ('ntc_junk', 'ses_parent', 0, '[]', 'b1')"
        )
    db.close()
    await store.close()

    store = SQLiteTaskStore(path)
    with caplog.at_level(logging.WARNING, logger="asyncagents.tasks.store"):
        await store.open()
        assert await store.list_tasks() == [good]
        assert await store.get("tsk_junk") is None
        assert await store.update("tsk_types", lambda t: (t, None)) is None
        assert await store.find_by_session("ses_x") is None  # the newest there is broken
        assert await store.notices() == [good_notice]
        assert [t.id for t in await store.take_over("m1", "b1")] == [good.id]
        assert [n.id for n in await store.claim_notices("m1", "b1", 60)] == [good_notice.id]
        removed = await store.delete_parent("ses_parent")
    assert [t.id for t in removed] == [good.id]
    assert await store.ids_with_prefix("tsk_") == []  # the broken rows went with their parent
    warned = " ".join(r.getMessage() for r in caplog.records)
    for row_id in ("tsk_junk", "tsk_types", "ntc_junk"):
        assert row_id in warned
    assert str(path) in warned
    await store.close()


# --- the first release's layout ------------------------------------------------------------------

#: the schema of the first release (tasks/store.py before schema versions), verbatim
_OLD_SCHEMA = """
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


def _old_json(record: Task | Notice) -> str:
    """The record as the first release wrote it (without the fields added since)."""
    new_fields = {"backend", "owner", "claimed_by", "claim_expires_at"}
    return record.model_dump_json(exclude=new_fields)


async def test_a_first_release_file_is_migrated_in_place_keeping_every_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    tasks = [
        make_task(f"tsk_old_{i}", backend="", status=s, created_at=i, session_id=f"ses_{i}")
        for i, s in enumerate([TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.ERROR])
    ]
    notices = [
        make_notice(tasks[1], created_at=5).model_copy(update={"backend": ""}),
        Notice(
            id="ntc_retry",
            task_id=tasks[2].id,
            parent_session_id=tasks[2].parent_session_id,
            kind=NoticeKind.ERROR,
            turn=1,
            text="failed",
            created_at=6,
            attempts=3,
            last_error="parent busy",
            next_attempt_at=now_ms() + 600_000,
        ),
    ]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(_OLD_SCHEMA)
    for t in tasks:
        db.execute(
            "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
            (t.id, t.parent_session_id, t.session_id, t.status.value, t.created_at, _old_json(t)),
        )
    for n in notices:
        db.execute(
            "INSERT INTO notices VALUES (?, ?, ?, ?)",
            (n.id, n.parent_session_id, n.created_at, _old_json(n)),
        )
    db.close()

    store = SQLiteTaskStore(path)
    await store.open()
    assert await store.list_tasks() == list(reversed(tasks))
    assert await store.notices() == notices
    assert [t.id for t in await store.take_over("m1", "")] == [tasks[0].id]
    # the saved retry time survived: only the due notice is claimed
    assert [n.id for n in await store.claim_notices("m1", "", 60)] == [notices[0].id]
    await store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert check.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()
    reopened = SQLiteTaskStore(path)  # opening a current file changes nothing
    assert len(await reopened.list_tasks()) == 3
    await reopened.close()


async def test_a_version_2_file_is_migrated_and_its_running_tasks_count_under_the_caps(
    tmp_path: Path,
) -> None:
    """Version 3 adds the admission queue: the agent of every task is copied into its column,
    so the tasks running before the upgrade count under the caps."""
    from asyncagents.tasks.store import sqlite as sqlite_store

    path = tmp_path / "tasks.db"
    running = make_task("tsk_run", backend="b1", status=TaskStatus.RUNNING)
    running.agent = "build"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    for statement in (*sqlite_store._V1_SCHEMA, *sqlite_store._MIGRATE_1_TO_2):
        db.execute(statement)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 2")
    rows = [(running.id, running.model_dump_json()), ("tsk_broken", "{not json")]
    for task_id, data in rows:
        db.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
            "backend, owner) VALUES (?, 'ses_p', NULL, 'running', 1, ?, 'b1', NULL)",
            (task_id, data),
        )
    db.close()
    store = SQLiteTaskStore(path)
    await store.open()
    view = await store.queue_view("b1")
    assert {(e.id, e.agent, e.running) for e in view.entries} == {
        ("tsk_run", "build", True),
        ("tsk_broken", "", True),
    }
    await store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    check.close()


async def test_a_migration_that_fails_leaves_the_first_release_file_as_it_was(
    tmp_path: Path,
) -> None:
    """The migration is one transaction: a step that fails undoes the steps before it."""
    path = tmp_path / "tasks.db"
    task = make_task("tsk_old", backend="")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(_OLD_SCHEMA)
    # an index the migration also creates (by name): its CREATE INDEX fails halfway through
    db.execute("CREATE INDEX tasks_owner ON tasks (status)")
    db.execute(
        "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
        (task.id, task.parent_session_id, None, "running", task.created_at, _old_json(task)),
    )
    db.close()

    def content() -> tuple[object, ...]:
        with sqlite3.connect(path) as check:
            out = (
                check.execute("PRAGMA user_version").fetchone(),
                check.execute("PRAGMA application_id").fetchone(),
                check.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
                check.execute("SELECT * FROM tasks").fetchall(),
            )
        check.close()
        return out

    before = content()
    store = SQLiteTaskStore(path)
    with pytest.raises(StoreError) as err:
        await store.open()
    assert str(path) in str(err.value)
    assert "index tasks_owner already exists" in str(err.value)
    await store.close()
    assert content() == before


async def test_a_new_file_gets_the_same_layout_as_a_migrated_one(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    with sqlite3.connect(old) as db:
        db.executescript(_OLD_SCHEMA)
    db.close()
    for path in (fresh, old):
        store = SQLiteTaskStore(path)
        await store.open()
        await store.close()

    def layout(path: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
        db.close()
        return [
            (name, "".join((sql or "").replace("IF NOT EXISTS ", "").split())) for name, sql in rows
        ]

    assert layout(fresh) == layout(old)


async def test_concurrent_first_opens_of_one_new_file_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    stores = [SQLiteTaskStore(path) for _ in range(6)]
    await asyncio.gather(*(s.open() for s in stores))
    await stores[0].insert(make_task("tsk_1"))
    assert [[t.id for t in await s.list_tasks()] for s in stores] == [["tsk_1"]] * 6
    for s in stores:
        await s.close()


class _RefusesTheWalSwitch:
    """A connection whose ``PRAGMA journal_mode = WAL`` fails `times` times with `code` at once,
    as SQLite does (without its busy handler) when several processes open one new file."""

    def __init__(self, db: sqlite3.Connection, times: float, code: int) -> None:
        self._db, self.left, self._code, self.tries = db, times, code, 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "PRAGMA journal_mode = WAL":
            self.tries += 1
            if self.left > 0:
                self.left -= 1
                exc = sqlite3.OperationalError("database is locked")
                exc.sqlite_errorcode = self._code
                raise exc
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _refusing(
    monkeypatch: pytest.MonkeyPatch, times: float, code: int = sqlite3.SQLITE_BUSY
) -> list[_RefusesTheWalSwitch]:
    made: list[_RefusesTheWalSwitch] = []
    connect = sqlite3.connect

    def patched(*args: Any, **kwargs: Any) -> Any:
        made.append(_RefusesTheWalSwitch(connect(*args, **kwargs), times, code))
        return made[-1]

    monkeypatch.setattr(sqlite_module.sqlite3, "connect", patched)
    return made


async def test_a_wal_switch_refused_as_busy_is_retried_until_it_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _refusing(monkeypatch, 3)
    store = SQLiteTaskStore(tmp_path / "tasks.db")
    await store.insert(make_task("tsk_1"))
    assert [t.id for t in await store.list_tasks()] == ["tsk_1"]
    assert made[0].tries == 4
    assert made[0].execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    await store.close()


async def test_a_wal_switch_busy_past_the_busy_timeout_fails_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _refusing(monkeypatch, float("inf"), sqlite3.SQLITE_BUSY | 0x100)  # extended code
    path = tmp_path / "tasks.db"
    store = SQLiteTaskStore(path, busy_timeout_ms=300)
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        await store.open()
    waited = time.monotonic() - started
    assert str(caught.value) == (
        f"SQLite task store {path}: opening the store failed: database is locked"
    )
    assert 0.25 <= waited < 5
    assert made[0].tries > 3


async def test_a_wal_switch_failing_otherwise_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _refusing(monkeypatch, float("inf"), sqlite3.SQLITE_IOERR)
    path = tmp_path / "tasks.db"
    with pytest.raises(StoreError) as caught:
        await SQLiteTaskStore(path).open()
    assert str(caught.value) == (
        f"SQLite task store {path}: opening the store failed: database is locked"
    )
    assert made[0].tries == 1


class _CreatesTheStoreMidCheck:
    """A connection that lets another store create the schema right after the first check has
    read the file's pragmas and before it reads its tables (the window two processes opening
    one new file can hit)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db, self._path, self._fired = db, path, False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith("SELECT type, name FROM sqlite_master") and not self._fired:
            self._fired = True

            def other_process() -> None:
                # locked out by the check's read transaction: it gives up, which is fine
                with contextlib.suppress(StoreError):
                    asyncio.run(SQLiteTaskStore(self._path, busy_timeout_ms=200).open())

            thread = threading.Thread(target=other_process)
            thread.start()
            thread.join(5)
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_a_store_created_by_another_process_during_the_first_check_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.db"
    connect = sqlite3.connect
    first = [True]

    def patched(*args: Any, **kwargs: Any) -> Any:
        # only the store under test gets the interleaving; the other one connects plainly
        db = connect(*args, **kwargs)
        if first[0]:
            first[0] = False
            return _CreatesTheStoreMidCheck(db, path)
        return db

    monkeypatch.setattr(sqlite_module.sqlite3, "connect", patched)
    store = SQLiteTaskStore(path)
    await store.open()
    await store.insert(make_task("tsk_1"))
    assert [t.id for t in await store.list_tasks()] == ["tsk_1"]
    await store.close()


# --- large records -------------------------------------------------------------------------------


async def test_a_50_mb_prompt_does_not_stall_the_event_loop(tmp_path: Path) -> None:
    """The write runs in a worker thread: the loop keeps ticking during every call.

    What remains on the loop's clock is the interpreter lock held by the JSON (de)serialisation of
    50 MB in pydantic-core (~0.1 s on a quiet machine); the old synchronous store blocked for the
    whole call (3.9 s), i.e. the loop did not tick at all during it: that is what the tick counts
    catch. The bound on the longest gap is generous (2 s): the machine is loaded.
    """
    store = SQLiteTaskStore(tmp_path / "tasks.db")
    await store.open()
    task = make_task("tsk_big")
    task.prompt = "é" * 25_000_000 + "x" * 25_000_000
    ticks: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)

    async def measured(call):  # type: ignore[no-untyped-def]
        start = len(ticks)
        began = time.perf_counter()
        out = await call
        ended = time.perf_counter()
        during = [began, *ticks[start:], ended]
        gap = max(b - a for a, b in itertools.pairwise(during))
        return out, len(ticks) - start, gap

    try:
        _, n_insert, gap_insert = await measured(store.insert(task))
        got, n_get, gap_get = await measured(store.get(task.id))
        _, n_update, gap_update = await measured(
            store.update(task.id, lambda t: (t.model_copy(update={"result": "ok"}), None))
        )
    finally:
        running = False
        await ticking
    assert got == task
    assert min(n_insert, n_get, n_update) >= 3, (n_insert, n_get, n_update)
    assert max(gap_insert, gap_get, gap_update) < 2.0, (gap_insert, gap_get, gap_update)
    await store.close()


async def test_a_version_2_file_gets_the_query_columns_from_its_rows(tmp_path: Path) -> None:
    """Version 2 -> 4 (through the admission queue's 3): agent, updated_at, duration, search text
    and tool names are filled from each row's JSON, so lists, searches and stats over old tasks
    answer as over new ones."""
    from asyncagents.tasks.queries import TaskQuery
    from asyncagents.tasks.store.sqlite import _MIGRATE_1_TO_2, _V1_SCHEMA

    path = tmp_path / "tasks.db"
    done = make_task("tsk_done", status=TaskStatus.COMPLETED, created_at=1_000)
    done.agent, done.result, done.completed_at, done.updated_at = (
        "explore",
        "Found IT",
        1_250,
        1_300,
    )
    done.progress = TaskProgress(tool_calls=3, tools={"grep": 2, "read": 1})
    running = make_task("tsk_run", created_at=2_000)
    db = sqlite3.connect(path, isolation_level=None)
    for statement in (*_V1_SCHEMA, *_MIGRATE_1_TO_2):
        db.execute(statement)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 2")
    for t in (done, running):
        db.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
            "backend, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                t.id,
                t.parent_session_id,
                None,
                t.status.value,
                t.created_at,
                t.model_dump_json(),
                t.backend,
                t.owner,
            ),
        )
    db.execute(
        "INSERT INTO tasks (id, parent_session_id, status, created_at, data, backend) "
        "VALUES ('tsk_broken', 'ses_parent', 'running', 3000, 'not json', 'b1')"
    )
    db.close()

    store = SQLiteTaskStore(path)
    page = await store.query_tasks(TaskQuery(backend="b1", text="found it"))
    assert page.tasks == [done] and page.total == 1
    by_update = await store.query_tasks(TaskQuery(backend="b1", sort="updated_at"))
    assert [t.id for t in by_update.tasks] == [running.id, done.id]  # the broken row is skipped
    assert by_update.total == 3  # but counted, as a row of the store
    stats = await store.task_stats("b1")
    assert stats.by_agent == {"": 1, "explore": 1, "general": 1}
    assert stats.tool_calls == {"grep": 2, "read": 1}
    assert stats.durations.count == 1 and stats.durations.max_ms == 250
    await store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    check.close()


async def test_a_version_3_file_gets_the_query_columns_and_totals_and_keeps_its_queue(
    tmp_path: Path,
) -> None:
    """Version 3 (the admission queue) -> 4: the queries' columns, the usage by model and the
    running totals come from each row's JSON; queued tasks are counted, and stay in the queue
    in their order with their agent and model."""
    from asyncagents.tasks.models import TaskUsage
    from asyncagents.tasks.queries import TaskQuery, UsageSums
    from asyncagents.tasks.store.sqlite import _MIGRATE_1_TO_2, _MIGRATE_2_TO_3, _V1_SCHEMA

    path = tmp_path / "tasks.db"
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
    db = sqlite3.connect(path, isolation_level=None)
    for statement in (*_V1_SCHEMA, *_MIGRATE_1_TO_2, *_MIGRATE_2_TO_3):
        db.execute(statement)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 3")
    for t in (done, waiting):
        db.execute(
            "INSERT INTO tasks (id, parent_session_id, session_id, status, created_at, data, "
            "backend, owner, agent, model, ready) "
            "VALUES (?, ?, NULL, ?, ?, ?, 'b1', NULL, ?, ?, 1)",
            (t.id, t.parent_session_id, t.status.value, t.created_at, t.model_dump_json(),
             t.agent, t.model),
        )  # fmt: skip
    db.execute(
        "INSERT INTO tasks (id, parent_session_id, status, created_at, data, backend, agent) "
        "VALUES ('tsk_broken', 'ses_top', 'queued', 3000, 'not json', 'b1', 'build')"
    )
    db.close()

    store = SQLiteTaskStore(path)
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
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    check.close()


async def test_a_file_without_the_queued_index_gets_it_on_open_and_keeps_its_version(
    tmp_path: Path,
) -> None:
    """The queued tasks' index (for a new task's place in its parent's queue) is made on open
    when a file of this version lacks it (a file written before it existed); the version stays
    and the rows are untouched."""
    path = tmp_path / "tasks.db"
    store = SQLiteTaskStore(path)
    queued = [make_task(f"tsk_q{i}", status=TaskStatus.QUEUED, created_at=i) for i in range(3)]
    for task in queued:
        await store.insert(task)
    await store.close()

    def indexes() -> set[str]:
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
        db.close()
        return {str(r[0]) for r in rows}

    assert "tasks_queued" in indexes()
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX tasks_queued")
    db.close()
    assert "tasks_queued" not in indexes()
    again = SQLiteTaskStore(path)
    assert [await again.queued_ahead(t) for t in queued] == [0, 1, 2]  # opens it first
    await again.close()
    assert "tasks_queued" in indexes()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert [r[0] for r in db.execute("SELECT id FROM tasks ORDER BY id")] == [
            "tsk_q0",
            "tsk_q1",
            "tsk_q2",
        ]
    db.close()
