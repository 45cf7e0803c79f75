"""`task()` returns before the child session exists, and nothing it acknowledged is lost.

The session is created in the background and recorded once per task (a compare-and-set):
a crash right after `task()` returned, or one between the creation and the record, leaves the
task to the next owner, which creates the session and runs the task once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from asyncagents.tasks import (
    InProcessBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from asyncagents.tasks.backend import JSON
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import session_of, until
from tasks_script import Script


def _config(**kw: object) -> TaskManagerConfig:
    base: dict[str, object] = {
        "poll_interval": 0.2,
        "wake": "never",
        "notice_interval": 0.1,
        "notice_retry_initial": 0.05,
        "lease_ttl": 0.6,
        "max_running": 100,
    }
    return TaskManagerConfig.model_validate({**base, **kw})


class _Sessions(InProcessBackend):
    """Child sessions (those with a parent) are created only once `gate` is set; with
    `hang_after_create`, the creation is made on the server but its answer never comes (a
    crash between OpenCode creating the session and the manager recording it)."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.gate = asyncio.Event()
        self.gate.set()
        self.hang_after_create = False
        self.asked = 0
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def create_session(self, parent_id: str | None = None, title: str | None = None) -> JSON:
        if parent_id is None:
            return await super().create_session(parent_id=parent_id, title=title)
        self.asked += 1
        await self.gate.wait()
        session = await super().create_session(parent_id=parent_id, title=title)
        self.created.append(str(session["id"]))
        if self.hang_after_create:
            await asyncio.Event().wait()
        return session

    async def delete_session(self, session_id: str) -> None:
        self.deleted.append(session_id)
        await super().delete_session(session_id)


async def _kill(manager: TaskManager) -> None:
    """Stop a manager as kill -9 would: nothing more runs, its lease is NOT dropped."""
    await manager.admitter.stop()
    await manager.leases.stop(drop_lease=False)
    await manager.watcher.stop()
    await manager.courier.stop()
    await manager.launches.cancel_all()
    await manager.jobs.cancel_all()
    manager._started = False


def _user_texts(backend: InProcessBackend, session_id: str) -> list[str]:
    return [
        str(p.get("text"))
        for m in backend._messages.get(session_id, [])
        if m["info"]["role"] == "user"
        for p in m["parts"]
    ]


async def _completed(manager: TaskManager, task_id: str) -> bool:
    task = await manager.store.get(task_id)
    return task is not None and task.status is TaskStatus.COMPLETED


async def test_task_returns_before_the_session_is_created(tmp_path: Path) -> None:
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.gate.clear()  # the server takes its time over the child session
    async with TaskManager(backend, SQLiteTaskStore(tmp_path / "t.sqlite3"), _config()) as m:
        text = await asyncio.wait_for(
            run_tool(
                m,
                parent,
                "asyncagents_task",
                {"prompt": "go", "agent": "explore", "description": "d"},
            ),
            5,
        )
        (task,) = await m.list(parent)
        # the reply names the task (the handle), never a session
        assert text == (
            f"Background task started: `{task.id}`\nAgent: explore\nDescription: d\n"
            "Status: running\nYou will get a notice in this session when it completes or "
            "fails; continue with other work meanwhile. To wait for it now, call "
            f'`asyncagents_output(task_id="{task.id}", block=true)`.'
        )
        assert task.status is TaskStatus.RUNNING and task.session_id is None
        assert backend.created == []
        # what reads a task copes with one that has no session yet
        out = await run_tool(m, parent, "asyncagents_output", {"task_id": task.id})
        assert out.startswith(f"Task `{task.id}` [running] explore: d\n"), out
        assert await m.messages(task.id) == []
        assert await m.tree(task.id) == []
        await until(lambda: backend.asked == 1, what="the session asked for")
        backend.gate.set()
        done = await m.output(task.id, block=True, timeout=10)
        assert done.task.status is TaskStatus.COMPLETED, done.task.error
        assert done.task.result == "Reply to: go"
        assert backend.created == [done.task.session_id]
        await until(lambda: _count(backend, parent, 1), timeout=10)


async def test_cancel_before_the_session_exists_just_ends_the_task(tmp_path: Path) -> None:
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.gate.clear()
    async with TaskManager(backend, SQLiteTaskStore(tmp_path / "t.sqlite3"), _config()) as m:
        task = await m.task(parent, "never sent", "explore", "cancelled early")
        await until(lambda: backend.asked == 1, what="the session asked for")
        text = await run_tool(m, parent, "asyncagents_cancel", {"task_id": task.id})
        assert text == f"Cancelled background task `{task.id}`: cancelled early"
        backend.gate.set()
        await until(lambda: len(backend.deleted) == 1, what="the unused session deleted")
        await m.wait_idle()
        final = await m.store.get(task.id)
        assert final is not None and final.status is TaskStatus.CANCELLED
        assert final.session_id is None  # never recorded: the session made late was deleted
        assert backend.deleted == backend.created
        assert [p for p in backend.prompts if p[0] != parent] == []  # no prompt was sent
        await asyncio.sleep(0.3)
        assert await notices_in(backend, parent) == []  # the parent did it: no notice


async def test_a_crash_right_after_task_returned_is_adopted_and_run_once(tmp_path: Path) -> None:
    """The first manager acknowledged the task and died before creating its session: the
    next owner creates it and runs the task, once."""
    path = tmp_path / "shared.sqlite3"
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.add_message(parent, "user", "Please look at src/app.py")
    backend.gate.clear()
    first = TaskManager(backend, SQLiteTaskStore(path), _config())
    await first.start()
    plain = await first.task(parent, "plain work", "explore", "plain")
    forked = await first.task(parent, "forked work", "explore", "forked", fork=True)
    await until(lambda: backend.asked == 2, what="both sessions asked for")
    await _kill(first)
    assert backend.created == []
    backend.gate.set()
    async with TaskManager(backend, SQLiteTaskStore(path), _config()) as heir:
        for task in (plain, forked):
            await until(lambda t=task: _completed(heir, t.id), 10, "the task done")
        done = {t.id: await heir.store.get(t.id) for t in (plain, forked)}
        await until(lambda: _count(backend, parent, 2), timeout=10)
        await asyncio.sleep(0.3)  # later passes: still one notice each
        assert len(await notices_in(backend, parent)) == 2
    await first.store.close()
    sessions = {t.id: str(t.session_id) for t in done.values() if t is not None}
    assert sorted(backend.created) == sorted(sessions.values())  # one session each
    assert _user_texts(backend, sessions[plain.id]) == ["plain work"]
    forked_texts = _user_texts(backend, sessions[forked.id])
    assert len(forked_texts) == 2 and "<inherited_context>" in forked_texts[0]
    assert forked_texts[1] == "forked work"


async def test_a_crash_between_creating_and_recording_the_session(tmp_path: Path) -> None:
    """OpenCode created the session but the manager died before recording it: the next
    owner creates another and runs the task once there; the first stays, empty."""
    path = tmp_path / "shared.sqlite3"
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.hang_after_create = True
    first = TaskManager(backend, SQLiteTaskStore(path), _config())
    await first.start()
    task = await first.task(parent, "work", "explore", "orphan")
    await until(lambda: len(backend.created) == 1, what="the session created")
    await _kill(first)
    backend.hang_after_create = False
    async with TaskManager(backend, SQLiteTaskStore(path), _config()) as heir:
        await until(lambda: _completed(heir, task.id), 10, "the task done")
        final = await heir.store.get(task.id)
    await first.store.close()
    assert final is not None and final.result == "Reply to: work"
    orphan, used = backend.created
    assert final.session_id == used
    assert _user_texts(backend, used) == ["work"]
    assert backend._messages[orphan] == []  # empty, never prompted


async def test_two_managers_creating_one_tasks_session_record_one(tmp_path: Path) -> None:
    """The first owner's lease ran out while its session creation hung; the next owner took
    the task and created its own. The first creation then ends: it is not recorded, it is
    deleted, and the task runs once, in the recorded session."""
    path = tmp_path / "shared.sqlite3"
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.gate.clear()
    first = TaskManager(backend, SQLiteTaskStore(path), _config())
    await first.start()
    task = await first.task(parent, "once", "explore", "raced")
    await until(lambda: backend.asked == 1, what="the first creation asked for")
    # the first manager stops renewing its lease (a long pause), its creation still in flight
    await first.leases.stop(drop_lease=False)
    await first.admitter.stop()
    async with TaskManager(backend, SQLiteTaskStore(path), _config()) as second:
        await until(lambda: backend.asked == 2, what="the second creation asked for")
        backend.gate.set()  # both creations end
        await until(lambda: _completed(second, task.id), 10, "the task done")
        await until(lambda: len(backend.deleted) == 1, what="the unrecorded session deleted")
        final = await second.store.get(task.id)
        await first.close()
    await first.store.close()
    assert final is not None and final.result == "Reply to: once"
    assert len(backend.created) == 2
    assert backend.deleted == [s for s in backend.created if s != final.session_id]
    assert _user_texts(backend, str(final.session_id)) == ["once"]
    replies = [
        m for m in backend._messages[str(final.session_id)] if m["info"]["role"] == "assistant"
    ]
    assert len(replies) == 1


async def test_the_session_of_a_task_is_polled_for_by_its_id(tmp_path: Path) -> None:
    """`session_of` (the tests' helper) finds the session once it is recorded."""
    backend = _Sessions(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    async with TaskManager(backend, SQLiteTaskStore(tmp_path / "t.sqlite3"), _config()) as m:
        task = await m.task(parent, "go", "explore", "d")
        assert await session_of(m, task.id) == backend.created[0]


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n
