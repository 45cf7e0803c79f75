"""A manager restart on the same SQLite store, and a server that is down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from asyncagents.tasks import (
    BackendUnavailableError,
    InMemoryTaskStore,
    OpenCodeBackend,
    PromptRequest,
    SQLiteTaskStore,
    TaskManager,
    TaskStatus,
    run_tool,
)
from e2e_support import AGENT, OpenCodeServer, free_port, has_notices, model_got, notices_in, until
from fake_model import FakeModel


async def test_restart_on_the_same_store_picks_the_task_up(
    opencode: OpenCodeServer, fake_model: FakeModel, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.sqlite3"
    prompt = "[fake:delay=3] outlive the manager"

    first_backend = OpenCodeBackend(opencode.base_url)
    first = TaskManager(first_backend, SQLiteTaskStore(path), poll_interval=30.0)
    await first.start()
    parent = str((await first_backend.create_session(title="restart parent"))["id"])
    task = await first.task(parent, prompt, AGENT, "across restart")
    await until(lambda: model_got(fake_model, prompt), what="model reached")
    await first.aclose()  # closes the manager, its store and its backend mid-run

    async with OpenCodeBackend(opencode.base_url) as backend:
        store = SQLiteTaskStore(path)
        try:
            async with TaskManager(backend, store, poll_interval=30.0) as second:
                (listed,) = await second.list(parent)
                assert listed.id == task.id and listed.status is TaskStatus.RUNNING
                out = await second.output(task.id, block=True, timeout=60)
                assert out.task.status is TaskStatus.COMPLETED, out.task.error
                assert out.task.result == f"Reply to: {prompt}"
                await until(lambda: has_notices(backend, parent, 1), what="completion notice")

                await second.task(parent, "after the restart", "", "", resume=task.id)
                again = await second.output(task.id, block=True, timeout=60)
                assert again.task.status is TaskStatus.COMPLETED, again.task.error
                assert again.task.result == "Reply to: after the restart"
                assert again.task.label == f"{task.id} (resumed)"
                await until(lambda: has_notices(backend, parent, 2), what="resume notice")
                await asyncio.sleep(1.5)
                notices = await notices_in(backend, parent)
                assert len(notices) == 2
                assert sum(f"Background task {task.id} completed" in n for n in notices) == 1
                assert sum("answered your follow-up" in n for n in notices) == 1
        finally:
            store.close()


async def test_a_down_server_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with (
        OpenCodeBackend(url, connect_timeout=2.0) as backend,
        TaskManager(backend, InMemoryTaskStore(), follow_events=False) as manager,
    ):
        with pytest.raises(BackendUnavailableError, match=f"OpenCode server at {url} "):
            await manager.task("ses_any", "hello", AGENT, "nowhere")
        assert await manager.list("ses_any") == []
        text = await run_tool(
            manager,
            "ses_any",
            "asyncagents_task",
            {"prompt": "hello", "agent": AGENT, "description": "nowhere"},
        )
        assert text.startswith(f"Error: OpenCode server at {url} is not reachable")


async def test_a_pending_notice_survives_the_restart_and_arrives_once(
    opencode: OpenCodeServer, fake_model: FakeModel, tmp_path: Path
) -> None:
    """The child ends while the parent is busy: the notice waits in the store, and the next
    manager delivers it once the parent is idle."""
    path = tmp_path / "tasks.sqlite3"
    async with OpenCodeBackend(opencode.base_url) as backend:
        parent = str((await backend.create_session(title="busy parent"))["id"])
        busy_prompt = "[fake:slow] parent busy across the restart"
        await backend.prompt_async(parent, PromptRequest(text=busy_prompt, agent=AGENT))
        await until(lambda: model_got(fake_model, busy_prompt), what="parent streaming")

        first = TaskManager(OpenCodeBackend(opencode.base_url), SQLiteTaskStore(path))
        await first.start()
        task = await first.task(parent, "quick child", AGENT, "notice pending")
        out = await first.output(task.id, block=True, timeout=60)
        assert out.task.status is TaskStatus.COMPLETED
        (pending,) = first.store.notices()
        assert pending.task_id == task.id
        await first.aclose()
        assert await notices_in(backend, parent) == []

        await backend.abort(parent)
        store = SQLiteTaskStore(path)
        try:
            async with TaskManager(backend, store, poll_interval=30.0) as second:
                await until(lambda: has_notices(backend, parent, 1), what="notice delivered")
                await asyncio.sleep(1.5)
                (notice,) = await notices_in(backend, parent)
                assert f"Background task {task.id} completed: notice pending" in notice
                assert second.store.notices() == []
        finally:
            store.close()
