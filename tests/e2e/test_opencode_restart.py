"""A manager restart on the same SQLite store, and a server that is down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from asyncagents.tasks import (
    BackendUnavailableError,
    InMemoryTaskStore,
    NoticeKind,
    OpenCodeBackend,
    PromptRequest,
    SQLiteTaskStore,
    TaskManager,
    TaskStatus,
    run_tool,
)
from asyncagents.tasks.manager import STALLED
from e2e_support import (
    AGENT,
    OpenCodeServer,
    free_port,
    has_notices,
    manager_config,
    model_got,
    running_server,
    until,
)
from fake_model import FakeModel
from parent_notices import notices_in
from polling import session_of


async def test_restart_on_the_same_store_picks_the_task_up(
    opencode: OpenCodeServer, fake_model: FakeModel, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.sqlite3"
    prompt = "[fake:delay=3] outlive the manager"

    first_backend = OpenCodeBackend(opencode.base_url)
    first = TaskManager(first_backend, SQLiteTaskStore(path), manager_config(poll_interval=30.0))
    await first.start()
    parent = str((await first_backend.create_session(title="restart parent"))["id"])
    task = await first.task(parent, prompt, AGENT, "across restart")
    await until(lambda: model_got(fake_model, prompt), what="model reached")
    await first.aclose()  # closes the manager, its store and its backend mid-run

    async with OpenCodeBackend(opencode.base_url) as backend:
        store = SQLiteTaskStore(path)
        try:
            async with TaskManager(backend, store, manager_config(poll_interval=30.0)) as second:
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
                assert sum(f"Background task `{task.id}` completed" in n for n in notices) == 1
                assert sum("answered your follow-up" in n for n in notices) == 1
        finally:
            await store.close()


async def test_a_down_server_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with (
        OpenCodeBackend(url, connect_timeout=2.0) as backend,
        TaskManager(backend, InMemoryTaskStore(), manager_config(follow_events=False)) as manager,
    ):
        # task() does not wait for the server: the task is returned, then ends in error
        task = await manager.task("ses_any", "hello", AGENT, "nowhere")
        out = await manager.output(task.id, block=True, timeout=30)
        assert out.task.status is TaskStatus.ERROR and out.task.session_id is None
        assert (out.task.error or "").startswith(
            f"creating the child session failed: OpenCode server at {url} is not reachable "
            f"(POST {url}/session: ConnectError: "
        )
        # its notice waits for the server (the parent is on it too)
        (notice,) = await manager.store.notices()
        assert notice.task_id == task.id and notice.kind is NoticeKind.ERROR
        # now that the server is known down, the next call tries before it returns
        with pytest.raises(BackendUnavailableError, match=f"OpenCode server at {url} "):
            await manager.task("ses_any", "hello", AGENT, "nowhere")
        assert [t.id for t in await manager.list("ses_any")] == [task.id]
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

        first = TaskManager(
            OpenCodeBackend(opencode.base_url), SQLiteTaskStore(path), manager_config()
        )
        await first.start()
        task = await first.task(parent, "quick child", AGENT, "notice pending")
        out = await first.output(task.id, block=True, timeout=60)
        assert out.task.status is TaskStatus.COMPLETED
        (pending,) = await first.store.notices()
        assert pending.task_id == task.id
        await first.aclose()
        assert await notices_in(backend, parent) == []

        await backend.abort(parent)
        store = SQLiteTaskStore(path)
        try:
            async with TaskManager(backend, store, manager_config(poll_interval=30.0)) as second:
                await until(lambda: has_notices(backend, parent, 1), what="notice delivered")
                await asyncio.sleep(1.5)
                (notice,) = await notices_in(backend, parent)
                assert f"Background task `{task.id}` completed: notice pending" in notice
                assert await second.store.notices() == []
        finally:
            await store.close()


async def test_server_restart_reconnects_the_event_stream(
    fake_model: FakeModel, tmp_path: Path
) -> None:
    """Its own server: stopped and started again on the same port and data directory."""
    with running_server(fake_model, tmp_path / "own") as server:
        async with (
            OpenCodeBackend(server.base_url) as backend,
            TaskManager(
                backend, InMemoryTaskStore(), manager_config(poll_interval=30.0)
            ) as manager,
        ):
            await asyncio.wait_for(manager.events.connected.wait(), 30)
            parent = str((await backend.create_session(title="restarted server"))["id"])
            before = await manager.task(parent, "before the restart", AGENT, "before")
            assert (await manager.output(before.id, block=True, timeout=60)).task.status is (
                TaskStatus.COMPLETED
            )
            assert manager.events.connections == 1

            server.stop()
            await until(lambda: not manager.events.connected.is_set(), what="stream dropped")
            server.start()
            await until(lambda: manager.events.connections == 2, what="stream reconnected")

            after = await manager.task(parent, "after the restart", AGENT, "after")
            out = await manager.output(after.id, block=True, timeout=60)
            assert out.task.status is TaskStatus.COMPLETED, out.task.error
            assert out.task.result == "Reply to: after the restart"
            await until(lambda: has_notices(backend, parent, 2), what="both notices")


async def test_a_run_lost_in_a_server_restart_ends_in_error(
    fake_model: FakeModel, tmp_path: Path
) -> None:
    """OpenCode drops a running turn when it restarts and leaves its last message unfinished
    forever; the manager must not wait for it forever. A quiet but busy run is not lost."""
    with running_server(fake_model, tmp_path / "own") as server:
        async with (
            OpenCodeBackend(server.base_url) as backend,
            TaskManager(
                backend, InMemoryTaskStore(), manager_config(poll_interval=0.5, stall_timeout=3.0)
            ) as manager,
        ):
            parent = str((await backend.create_session(title="lost run"))["id"])
            # 6 s without a token from the model (longer than stall_timeout): still alive
            quiet = await manager.task(parent, "[fake:delay=6] quiet", AGENT, "quiet")
            out = await manager.output(quiet.id, block=True, timeout=60)
            assert out.task.status is TaskStatus.COMPLETED, out.task.error
            assert out.task.result == "Reply to: [fake:delay=6] quiet"

            prompt = "[fake:slow] lost in the restart"
            lost = await manager.task(parent, prompt, AGENT, "lost")
            await until(lambda: model_got(fake_model, prompt), what="slow stream started")
            lost_session = await session_of(manager, lost.id)
            await until(lambda: _answering(backend, lost_session), what="assistant message")
            server.stop()
            server.start()
            out = await manager.output(lost.id, block=True, timeout=60)
            assert out.task.status is TaskStatus.ERROR
            assert out.task.error == STALLED
            # the streamed text was never stored (parts are saved when they end)
            assert out.task.result is None
            assert out.task.progress.steps == 1
            await until(lambda: has_notices(backend, parent, 2), what="error notice")
            notices = await notices_in(backend, parent)
            assert f"Background task `{lost.id}` failed: lost" in notices[1]


async def _answering(backend: OpenCodeBackend, session_id: str) -> bool:
    messages = await backend.messages(session_id)
    return any(m["info"]["role"] == "assistant" for m in messages)
