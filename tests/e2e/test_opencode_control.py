"""Watching and stopping tasks against a real ``opencode serve``: output, cancel, clear, list,
deleted sessions, notices to a busy parent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    OpenCodeBackend,
    PromptRequest,
    SessionNotFoundError,
    TaskManager,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskStatus,
    run_tool,
)
from asyncagents.tasks.usage import usage_compact
from e2e_support import AGENT, OpenCodeServer, has_notices, manager_config, model_got, say, until
from fake_model import FakeModel
from parent_notices import notices_in, texts
from polling import session_of

ABORTED = "MessageAbortedError"


async def _last_assistant(backend: OpenCodeBackend, session_id: str) -> dict[str, Any] | None:
    messages = await backend.messages(session_id)
    infos = [m["info"] for m in messages if m["info"]["role"] == "assistant"]
    return infos[-1] if infos else None


async def _aborted(backend: OpenCodeBackend, session_id: str) -> bool:
    last = await _last_assistant(backend, session_id)
    return last is not None and (last.get("error") or {}).get("name") == ABORTED


async def _idle(backend: OpenCodeBackend, session_id: str) -> bool:
    return session_id not in await backend.status()


async def test_output_of_a_running_task_and_a_timed_out_block(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:tool] [fake:slow] keep going"
    task = await manager.task(parent, prompt, AGENT, "slow one")
    await until(lambda: model_got(fake_model, prompt), what="slow stream started")
    task.session_id = await session_of(manager, task.id)
    # wait for the tool step to be stored, then for the streaming text step to start
    await until(lambda: _steps(backend, task.session_id, 2), what="second step")

    now = await manager.output(task.id)
    assert now.task.status is TaskStatus.RUNNING and not now.timed_out
    assert now.waited_seconds == 0.0

    out = await manager.output(task.id, block=True, timeout=1.0)
    assert out.timed_out
    assert out.task.status is TaskStatus.RUNNING
    assert 1.0 <= out.waited_seconds < 5.0
    assert out.task.result_retrieved_at is None and out.task.result is None
    assert out.task.progress.tool_calls == 1
    assert out.task.progress.last_tool == "bash"
    assert out.task.progress.steps == 2
    assert out.task.progress.last_activity_at is not None
    text = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "block": True, "timeout": 0.5}
    )
    assert text.startswith("Still running after waiting ")
    assert f"Task `{task.id}` [running] {AGENT}: slow one" in text
    assert "1 tool call(s) so far (last: bash)" in text
    await manager.cancel(task.id)


async def _steps(backend: OpenCodeBackend, session_id: str, n: int) -> bool:
    messages = await backend.messages(session_id)
    return sum(1 for m in messages if m["info"]["role"] == "assistant") >= n


async def test_cancel_aborts_the_session_and_stays_cancelled(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:slow] cancel me"
    task = await manager.task(parent, prompt, AGENT, "to cancel")
    await until(lambda: model_got(fake_model, prompt), what="slow stream started")
    task.session_id = await session_of(manager, task.id)
    assert task.session_id in await backend.status()  # busy on the server

    cancelled = await manager.cancel(task.id)
    assert cancelled.status is TaskStatus.CANCELLED
    assert cancelled.error == "cancelled by the parent"
    await until(lambda: _aborted(backend, task.session_id), what="MessageAbortedError")
    await until(lambda: _idle(backend, task.session_id), what="child idle")

    # the run ended on the server (aborted); a re-check must not turn it into completed/error
    manager.reconcile()
    await manager.wait_idle(10)
    await asyncio.sleep(1.5)
    out = await manager.output(task.id)
    assert out.task.status is TaskStatus.CANCELLED
    assert out.task.result is None
    assert await notices_in(backend, parent) == []
    with pytest.raises(TaskNotRunningError, match="is cancelled"):
        await manager.cancel(task.id)


async def test_cancel_of_a_completed_task_is_refused(manager: TaskManager, parent: str) -> None:
    task = await manager.task(parent, "quick one", AGENT, "done")
    assert (await manager.output(task.id, block=True, timeout=60)).task.status is (
        TaskStatus.COMPLETED
    )
    with pytest.raises(TaskNotRunningError, match="is completed"):
        await manager.cancel(task.id)
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": task.id})
    assert text.startswith(f"Error: Task `{task.id}` is completed, not running")


async def test_clear_removes_the_parents_tasks_and_aborts_running_ones(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    other = str((await backend.create_session(title="other parent"))["id"])
    done = await manager.task(parent, "finished before clear", AGENT, "done one")
    await manager.output(done.id, block=True, timeout=60)
    slow_prompt = "[fake:slow] cleared while running"
    running = await manager.task(parent, slow_prompt, AGENT, "running one")
    kept = await manager.task(other, "someone else's job", AGENT, "kept")
    await until(lambda: model_got(fake_model, slow_prompt), what="slow stream started")
    running.session_id = await session_of(manager, running.id)

    removed = await manager.clear(parent)
    assert {t.id for t in removed} == {done.id, running.id}
    await until(lambda: _aborted(backend, running.session_id), what="aborted on clear")
    assert await manager.list(parent) == []
    assert await run_tool(manager, parent, "asyncagents_list", {}) == "No background tasks found"
    with pytest.raises(TaskNotFoundError):
        await manager.output(running.id)
    # the other parent's task is untouched
    out = await manager.output(kept.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED
    assert [t.id for t in await manager.list(other)] == [kept.id]
    await until(lambda: has_notices(backend, other, 1), what="other parent's notice")


async def test_list_is_newest_first_per_parent_with_marks_and_filter(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    other = str((await backend.create_session(title="other parent"))["id"])
    await say(backend, parent, "some history to fork")
    plain = await manager.task(parent, "plain job", AGENT, "plain")
    forked = await manager.task(parent, "[fake:context] forked job", AGENT, "forked", fork=True)
    theirs = await manager.task(other, "their job", AGENT, "theirs")
    for t in (plain, forked, theirs):
        assert (await manager.output(t.id, block=True, timeout=60)).task.status is (
            TaskStatus.COMPLETED
        )
    await manager.task(parent, "plain follow-up", "", "", resume=plain.id)
    await manager.output(plain.id, block=True, timeout=60)
    slow = await manager.task(parent, "[fake:slow] newest", AGENT, "newest")

    assert [t.id for t in await manager.list(parent)] == [slow.id, forked.id, plain.id]
    assert [t.id for t in await manager.list(other)] == [theirs.id]
    assert [t.id for t in await manager.list(parent, status=TaskStatus.RUNNING)] == [slow.id]
    assert [t.id for t in await manager.list(parent, status=TaskStatus.COMPLETED)] == [
        forked.id,
        plain.id,
    ]
    assert await manager.list(parent, status=TaskStatus.ERROR) == []
    text = await run_tool(manager, parent, "asyncagents_list", {})
    spent = {t.id: f"({usage_compact(t.usage)})" for t in await manager.list(parent)}
    assert spent[slow.id] == "(0 tokens, $0.00)"  # its first step still streams
    assert text.splitlines() == [
        "Background tasks (newest first):",
        f"- `{slow.id}` [running] {AGENT}: newest {spent[slow.id]}",
        f"- `{forked.id}` (forked) [completed] {AGENT}: forked {spent[forked.id]}",
        f"- `{plain.id}` (resumed) [completed] {AGENT}: plain {spent[plain.id]}",
    ]
    running_only = await run_tool(manager, parent, "asyncagents_list", {"status": "running"})
    assert running_only.splitlines()[1:] == [
        f"- `{slow.id}` [running] {AGENT}: newest {spent[slow.id]}"
    ]
    # another parent cannot read or cancel these
    with pytest.raises(TaskNotFoundError):
        await manager.output(plain.id, parent_session_id=other)
    await manager.cancel(slow.id)


async def test_deleted_child_session_ends_the_task_in_error(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:slow] child gets deleted"
    task = await manager.task(parent, prompt, AGENT, "deleted child")
    await until(lambda: model_got(fake_model, prompt), what="slow stream started")
    task.session_id = await session_of(manager, task.id)
    await backend.delete_session(task.session_id)
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error == "The task's session was deleted before it finished."
    with pytest.raises(SessionNotFoundError):
        await backend.get_session(task.session_id)
    # OpenCode keeps running a deleted session's turn: the manager must have aborted it
    await until(lambda: _idle(backend, task.session_id), what="deleted child's run stopped")
    await until(lambda: has_notices(backend, parent, 1), what="error notice")
    (notice,) = await notices_in(backend, parent)
    assert f"Background task `{task.id}` failed: deleted child" in notice


async def test_deleted_parent_session_clears_and_aborts_its_tasks(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:slow] parent gets deleted"
    task = await manager.task(parent, prompt, AGENT, "orphan")
    done = await manager.task(parent, "done before delete", AGENT, "done")
    await manager.output(done.id, block=True, timeout=60)
    await until(lambda: model_got(fake_model, prompt), what="slow stream started")
    task.session_id = await session_of(manager, task.id)
    await backend.delete_session(parent)
    await until(lambda: _cleared(manager, parent), what="parent's tasks cleared")
    assert await manager.store.get(task.id) is None and await manager.store.get(done.id) is None
    # the child's run no longer goes on (aborted, or deleted along with its parent)
    await until(lambda: _idle(backend, task.session_id), what="child not busy")
    try:
        aborted = await _aborted(backend, task.session_id)
    except SessionNotFoundError:
        aborted = True
    assert aborted


async def _cleared(manager: TaskManager, parent: str) -> bool:
    return await manager.list(parent) == []


async def test_notice_waits_until_the_busy_parent_is_idle(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    parent_prompt = "[fake:delay=6] parent keeps working"
    await backend.prompt_async(parent, PromptRequest(text=parent_prompt, agent=AGENT))
    await until(lambda: _busy(backend, parent), what="parent busy")
    task = await manager.task(parent, "quick child", AGENT, "while busy")
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED
    await asyncio.sleep(1.2)  # notice passes while the parent still runs its 6 s turn
    assert await _busy(backend, parent)
    assert await notices_in(backend, parent) == []  # not slipped into the running turn
    await until(lambda: has_notices(backend, parent, 1), what="notice after the parent's turn")
    messages = await backend.messages(parent)
    flat = [t for m in messages for t in texts(m)]
    assert flat[:2] == [parent_prompt, f"Reply to: {parent_prompt}"]
    assert len(flat) == 3 and flat[2].startswith("[asyncagents notice ")


async def _busy(backend: OpenCodeBackend, session_id: str) -> bool:
    return session_id in await backend.status()


async def test_cancel_right_after_launch_stops_the_run(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    """Cancel before the prompt is even sent / before the server shows the run as busy."""
    prompt = "[fake:slow] cancelled at once"
    task = await manager.task(parent, prompt, AGENT, "instant cancel")
    cancelled = await manager.cancel(task.id)
    assert cancelled.status is TaskStatus.CANCELLED
    await manager.wait_idle(30)  # the launch job has run (and seen the cancel)
    await asyncio.sleep(2.0)  # long enough for a run that slipped through to be busy
    final = (await manager.output(task.id)).task
    assert final.status is TaskStatus.CANCELLED
    if final.session_id is None:
        # cancelled before its session was recorded: the session made then was deleted, and
        # no prompt was sent
        assert not model_got(fake_model, prompt)
    else:
        assert await _idle(backend, final.session_id)
        last = await _last_assistant(backend, final.session_id)
        assert last is None or (last.get("error") or {}).get("name") == ABORTED
    assert await notices_in(backend, parent) == []


class _NoAbortBackend(OpenCodeBackend):
    """Its aborts never reach the server, so a cancelled run completes anyway."""

    async def abort(self, session_id: str) -> bool:
        return True


async def test_a_run_that_completes_after_cancel_stays_cancelled(
    opencode: OpenCodeServer, fake_model: FakeModel, parent: str
) -> None:
    async with (
        _NoAbortBackend(opencode.base_url) as backend,
        TaskManager(backend, InMemoryTaskStore(), manager_config(poll_interval=0.5)) as manager,
    ):
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        prompt = "[fake:delay=2] finishes despite the cancel"
        task = await manager.task(parent, prompt, AGENT, "late completion")
        await until(lambda: model_got(fake_model, prompt), what="model reached")
        assert (await manager.cancel(task.id)).status is TaskStatus.CANCELLED
        task.session_id = await session_of(manager, task.id)
        # the run really ends with its reply on the server...
        await until(lambda: _replied(backend, task.session_id, prompt), what="reply stored")
        manager.reconcile()
        await asyncio.sleep(1.5)  # ...and events, checks and notice passes have seen it
        await manager.wait_idle(10)
        out = await manager.output(task.id)
        assert out.task.status is TaskStatus.CANCELLED
        assert out.task.result is None and out.task.error == "cancelled by the parent"
        assert await notices_in(backend, parent) == []


async def _replied(backend: OpenCodeBackend, session_id: str, prompt: str) -> bool:
    messages = await backend.messages(session_id)
    return f"Reply to: {prompt}" in [t for m in messages for t in texts(m)]
