"""The manager's own logic over the in-process backend, on both stores."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from asyncagents import build_fork_context
from asyncagents.tasks import (
    TOOL_NAMES,
    ForkResumeConflictError,
    InMemoryTaskStore,
    InProcessBackend,
    NoticeKind,
    PromptRequest,
    SessionExpiredError,
    SQLiteTaskStore,
    Task,
    TaskBeingResumedError,
    TaskManager,
    TaskManagerConfig,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskStatus,
)
from asyncagents.tasks.backend import JSON
from asyncagents.tasks.notices import notice_tag
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import session_of, until
from tasks_script import Script


def _cfg(**kw: object) -> TaskManagerConfig:
    """The tests' config: notices as noReply messages (the wake modes have their own tests)."""
    return TaskManagerConfig.model_validate({"wake": "never", **kw})


async def _gone(manager: TaskManager, task_id: str) -> bool:
    return await manager.store.get(task_id) is None


async def _retried(manager: TaskManager) -> bool:
    return any(n.attempts > 0 for n in await manager.store.notices())


async def _none_pending(manager: TaskManager) -> bool:
    return not await manager.store.notices()


async def test_launch_returns_at_once_and_completes_once(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] work", "explore", "hold on")
    assert task.status is TaskStatus.RUNNING and not task.is_forked
    # its child session is created in the background: the task id is the handle
    assert task.session_id is None and task.parent_session_id == parent
    session = await backend.get_session(await session_of(manager, task.id))
    assert session["parentID"] == parent
    await until(lambda: bool(script.seen))
    assert (await manager.output(task.id)).task.status is TaskStatus.RUNNING
    script.release.set()
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.COMPLETED and not out.timed_out
    assert out.task.result == "Reply to: [hold] work"
    assert out.task.result_retrieved_at is not None
    await until(lambda: _count(backend, parent, 1))
    await asyncio.sleep(0.3)  # a reconcile pass and a notice pass later: still exactly one
    notices = await notices_in(backend, parent)
    assert len(notices) == 1 and "completed" in notices[0] and "Reply to: [hold] work" in notices[0]


async def test_children_never_get_the_task_tools(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "first", "explore", "tools off")
    await manager.output(task.id, block=True, timeout=5)
    await manager.task(parent, "again", "", "", resume=task.id)
    await manager.output(task.id, block=True, timeout=5)
    child = await session_of(manager, task.id)
    child_prompts = [body for sid, body in backend.prompts if sid == child]
    assert len(child_prompts) == 2
    for body in child_prompts:
        assert body["tools"] == dict.fromkeys(TOOL_NAMES, False)
        assert body["agent"] == "explore"
    assert all(turn.tools == dict.fromkeys(TOOL_NAMES, False) for turn in script.seen)


async def test_output_progress_block_and_timeout(
    manager: TaskManager, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[tool][hold] go", "explore", "progress")
    await until(lambda: bool(script.seen))
    await asyncio.sleep(0.05)
    out = await manager.output(task.id)
    assert out.task.status is TaskStatus.RUNNING
    assert out.task.progress.tool_calls == 1 and out.task.progress.last_tool == "bash"
    assert out.task.progress.last_activity_at is not None
    waited = await manager.output(task.id, block=True, timeout=0.2)
    assert waited.timed_out and waited.task.status is TaskStatus.RUNNING
    assert waited.task.result_retrieved_at is None
    script.release.set()
    done = await manager.output(task.id, block=True, timeout=5)
    assert done.task.status is TaskStatus.COMPLETED
    assert done.task.progress.tool_calls == 1


async def test_list_filters_marks_and_orders(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    other = str((await backend.create_session())["id"])
    assert await manager.list(parent) == []
    plain = await manager.task(parent, "one", "explore", "plain")
    forked = await manager.task(parent, "two", "explore", "forked", fork=True)
    await manager.task(other, "three", "explore", "someone else's")
    for t in (plain, forked):
        await manager.output(t.id, block=True, timeout=5)
    await manager.task(parent, "more", "", "", resume=plain.id)
    await manager.output(plain.id, block=True, timeout=5)
    listed = await manager.list(parent)
    assert [t.id for t in listed] == [forked.id, plain.id]  # newest first, only mine
    assert listed[0].label == f"{forked.id} (forked)"
    assert listed[1].label == f"{plain.id} (resumed)"
    assert await manager.list(parent, status=TaskStatus.ERROR) == []
    with pytest.raises(TaskNotFoundError):
        await manager.output(plain.id, parent_session_id=other)


async def test_rejections_are_typed_and_say_what_to_do(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    with pytest.raises(ForkResumeConflictError, match="mutually exclusive"):
        await manager.task(parent, "x", "explore", "d", fork=True, resume="tsk_x")
    with pytest.raises(TaskNotFoundError, match="asyncagents_list"):
        await manager.output("tsk_nope")
    with pytest.raises(TaskNotFoundError):
        await manager.task(parent, "x", "", "", resume="tsk_nope")
    running = await manager.task(parent, "[hold] x", "explore", "d")
    with pytest.raises(TaskNotCompletedError, match="block=true"):
        await manager.task(parent, "more", "", "", resume=running.id)
    script.release.set()
    await manager.output(running.id, block=True, timeout=5)
    script.release.clear()
    await manager.task(parent, "[hold] more", "", "", resume=running.id)
    with pytest.raises(TaskBeingResumedError, match="being resumed"):
        await manager.task(parent, "even more", "", "", resume=running.id)
    script.release.set()
    await manager.output(running.id, block=True, timeout=5)
    await backend.delete_session(await session_of(manager, running.id))
    with pytest.raises(SessionExpiredError, match="new asyncagents_task"):
        await manager.task(parent, "after delete", "", "", resume=running.id)
    done = (await manager.output(running.id)).task
    with pytest.raises(TaskNotRunningError):
        await manager.cancel(done.id)


async def test_concurrent_resumes_only_one_wins(
    manager: TaskManager, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "start", "explore", "d")
    await manager.output(task.id, block=True, timeout=5)
    results = await asyncio.gather(
        *(manager.task(parent, "[hold] again", "", "", resume=task.id) for _ in range(5)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Task) for r in results) == 1
    assert all(isinstance(r, (Task, TaskBeingResumedError)) for r in results)
    script.release.set()
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.resume_count == 1 and out.task.status is TaskStatus.COMPLETED


async def test_resume_notice_has_the_response_up_to_the_notice_bound(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    task = await manager.task(parent, "start", "explore", "d")
    await manager.output(task.id, block=True, timeout=5)
    long = "x" * 3000 + "y" * 2000
    resumed = await manager.task(parent, long, "", "", resume=task.id)
    assert resumed.status is TaskStatus.RESUMED and resumed.resume_count == 1
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.result == "Reply to: " + long
    await until(lambda: _count(backend, parent, 2))
    notices = await notices_in(backend, parent)
    # 5,010 characters: the first 3,200 and the last 800 around the fork pipeline's marker
    shown = (
        "Full response:\nReply to: "
        + "x" * 3000
        + "y" * 190
        + "\n...[truncated 1010 chars]...\n"
        + "y" * 800
    )
    assert "answered your follow-up" in notices[1] and shown in notices[1]
    assert (
        f"{'y' * 800}\nThe result above is cut; it has 5,010 characters. Read all of it with "
        f'`asyncagents_output(task_id="{task.id}")`.\n\n'
    ) in notices[1]


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def test_provider_error_ends_in_error_with_the_message(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    task = await manager.task(parent, "[fail] x", "explore", "will fail")
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error == "APIError: Invalid request: rejected by the provider"
    await until(lambda: _count(backend, parent, 1))
    (notice,) = await notices_in(backend, parent)
    assert "failed" in notice and "rejected by the provider" in notice
    with pytest.raises(TaskNotCompletedError, match="ended as error"):
        await manager.task(parent, "again", "", "", resume=task.id)


async def test_cancel_aborts_and_is_not_overwritten(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] long", "explore", "cancel me")
    await until(lambda: bool(script.seen))
    cancelled = await manager.cancel(task.id)
    assert cancelled.status is TaskStatus.CANCELLED
    assert cancelled.session_id
    messages = await backend.messages(cancelled.session_id)
    assert messages[-1]["info"]["error"]["name"] == "MessageAbortedError"
    await asyncio.sleep(0.3)
    assert (await manager.output(task.id)).task.status is TaskStatus.CANCELLED
    assert await notices_in(backend, parent) == []


async def test_clear_aborts_running_and_removes(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    done = await manager.task(parent, "quick", "explore", "done one")
    await manager.output(done.id, block=True, timeout=5)
    running = await manager.task(parent, "[hold] long", "explore", "running one")
    await until(lambda: len(script.seen) == 2)
    running_session = await session_of(manager, running.id)
    removed = await manager.clear(parent)
    assert {t.id for t in removed} == {done.id, running.id}
    assert await manager.list(parent) == []
    assert running_session not in await backend.status()
    with pytest.raises(TaskNotFoundError):
        await manager.output(running.id)
    assert await manager.clear(parent) == []


async def test_missed_events_are_reconciled(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    backend.drop_events = True
    task = await manager.task(parent, "[sleep] quiet", "explore", "no events")
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.COMPLETED


async def test_event_stream_reconnects(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    assert manager.events.connections == 1
    backend.disconnect()
    await until(lambda: manager.events.connections == 2)
    task = await manager.task(parent, "after reconnect", "explore", "d")
    assert (await manager.output(task.id, block=True, timeout=5)).task.status is (
        TaskStatus.COMPLETED
    )


async def test_deleted_child_and_deleted_parent(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] x", "explore", "child deleted")
    await until(lambda: bool(script.seen))
    await backend.delete_session(await session_of(manager, task.id))
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR and "deleted" in (out.task.error or "")
    other = await manager.task(parent, "[hold] y", "explore", "parent deleted")
    await until(lambda: len(script.seen) == 2)
    other_session = await session_of(manager, other.id)
    await backend.delete_session(parent)
    await until(lambda: _gone(manager, other.id))
    assert other_session not in await backend.status()


async def test_undelivered_notice_is_kept_and_retried(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    backend.fail_prompts.add(parent)
    task = await manager.task(parent, "x", "explore", "notice retry")
    await manager.output(task.id, block=True, timeout=5)
    await until(lambda: _retried(manager))
    (pending,) = await manager.store.notices()
    assert pending.kind is NoticeKind.COMPLETED and pending.task_id == task.id
    backend.fail_prompts.clear()
    await until(lambda: _none_pending(manager), timeout=10)
    await asyncio.sleep(0.2)
    assert len(await notices_in(backend, parent)) == 1


async def test_notice_waits_while_parent_is_busy(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "child", "explore", "d")
    # the parent runs a turn of its own that holds until released
    await backend.prompt_async(parent, backend_request("[hold] parent turn"))
    await until(lambda: len(script.seen) == 2)
    await manager.output(task.id, block=True, timeout=5)
    await asyncio.sleep(0.3)
    assert await notices_in(backend, parent) == []  # not slipped into the running turn
    script.release.set()
    await until(lambda: _count(backend, parent, 1))


def backend_request(text: str):  # type: ignore[no-untyped-def]
    from asyncagents.tasks import PromptRequest

    return PromptRequest(text=text)


async def test_fork_injects_context_before_the_prompt(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    backend.add_message(parent, "user", "Please look at src/app.py")
    backend.add_message(parent, "assistant", "It defines compute_total.")
    task = await manager.task(parent, "[context] continue", "explore", "forked", fork=True)
    assert task.is_forked
    out = await manager.output(task.id, block=True, timeout=10)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.fork_stats is not None and out.task.fork_stats["original_count"] == 2
    assert out.task.session_id
    messages = await backend.messages(out.task.session_id)
    injected = messages[0]["parts"][0]["text"]
    assert "<inherited_context>" in injected and "compute_total" in injected
    assert messages[1]["parts"][0]["text"] == "[context] continue"
    assert len(script.seen) == 1  # the injection produced no reply
    assert any("compute_total" in m["parts"][0].get("text", "") for m in script.seen[0].history)
    injected_body = next(b for s, b in backend.prompts if s == out.task.session_id)
    assert injected_body["noReply"] is True
    assert injected_body["tools"] == dict.fromkeys(TOOL_NAMES, False)


async def test_fork_of_a_real_session_injects_exactly_the_pipeline_text(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    fixture = Path(__file__).parent.parent / "fixtures" / "messages_main_after_compaction.json"
    backend.seed_messages(parent, json.loads(fixture.read_bytes()))
    expected = build_fork_context(await backend.messages_raw(parent))
    assert expected.stats.compaction_detected
    task = await manager.task(parent, "go on", "explore", "real fork", fork=True)
    out = await manager.output(task.id, block=True, timeout=10)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.fork_stats == {
        **expected.stats.model_dump(mode="json"),
        "char_budget": 200_000,
        "budget_reason": (
            "the default, which is smaller than what fits (sized to the context window of "
            "inprocess/inprocess: 200000 tokens, less 8192 for output and 8000 for OpenCode's "
            "system prompt and tools, at 3 characters a token, less 1000 characters for this "
            "preamble and 5 for the task's prompt: 550419 characters)"
        ),
        "fork_turns": None,
    }
    assert out.task.session_id
    child = await backend.messages(out.task.session_id)
    assert child[0]["parts"][0]["text"] == expected.text
    assert child[1]["parts"][0]["text"] == "go on"


async def test_fork_failure_is_an_error_not_a_silent_fork(
    backend: InProcessBackend, store: InMemoryTaskStore | SQLiteTaskStore, parent: str
) -> None:
    def broken(raw: bytes, config: object = None) -> object:
        raise ValueError("messages[0]: not an object")

    async with TaskManager(backend, store, _cfg(poll_interval=0.2), fork_builder=broken) as manager:  # type: ignore[arg-type]
        task = await manager.task(parent, "x", "explore", "bad fork", fork=True)
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.ERROR
        assert "fork: building the context failed" in (out.task.error or "")
        assert "not an object" in (out.task.error or "")
        await until(lambda: _count(backend, parent, 1))


async def test_fork_of_a_missing_parent_fails_with_the_reason(
    manager: TaskManager, backend: InProcessBackend
) -> None:
    task = await manager.task("ses_gone", "x", "explore", "no parent", fork=True)
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR
    assert "reading the parent's messages failed" in (out.task.error or "")


async def test_many_concurrent_tasks_lose_no_completion(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    tasks = await asyncio.gather(
        *(manager.task(parent, f"[sleep] n{i}", "explore", f"t{i}") for i in range(50))
    )
    outs = await asyncio.gather(*(manager.output(t.id, block=True, timeout=10) for t in tasks))
    assert all(o.task.status is TaskStatus.COMPLETED for o in outs)
    assert {o.task.result for o in outs} == {f"Reply to: [sleep] n{i}" for i in range(50)}
    await until(lambda: _count(backend, parent, 50), timeout=10)
    await asyncio.sleep(0.3)
    notices = await notices_in(backend, parent)
    assert len(notices) == 50
    assert len({t.id for t in tasks}) == 50
    assert all(sum(t.id in n for n in notices) == 1 for t in tasks)


async def test_restart_reattaches_lists_and_resumes(
    backend: InProcessBackend, tmp_path: Path, parent: str, script: Script
) -> None:
    path = tmp_path / "restart.sqlite3"
    first = TaskManager(backend, SQLiteTaskStore(path), _cfg(poll_interval=0.2))
    await first.start()
    done = await first.task(parent, "quick", "explore", "before restart")
    await first.output(done.id, block=True, timeout=5)
    running = await first.task(parent, "[hold] slow", "explore", "across restart")
    await until(lambda: len(script.seen) == 2)
    await first.close()
    await first.store.close()

    async with TaskManager(backend, SQLiteTaskStore(path), _cfg(poll_interval=0.2)) as second:
        assert {t.id for t in await second.list(parent)} == {done.id, running.id}
        assert (await second.output(done.id)).task.result == "Reply to: quick"
        script.release.set()
        out = await second.output(running.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED
        await second.task(parent, "follow", "", "", resume=done.id)
        again = await second.output(done.id, block=True, timeout=5)
        assert again.task.result == "Reply to: follow" and again.task.label.endswith("(resumed)")


async def test_restart_while_server_ran_without_us(
    backend: InProcessBackend, tmp_path: Path, parent: str, script: Script
) -> None:
    """A task that completed while no manager watched is found done on start."""
    path = tmp_path / "offline.sqlite3"
    first = TaskManager(backend, SQLiteTaskStore(path), _cfg(poll_interval=0.2))
    await first.start()
    task = await first.task(parent, "[hold] x", "explore", "finished offline")
    await until(lambda: len(script.seen) == 1)
    await first.close()
    script.release.set()
    await asyncio.sleep(0.05)
    async with TaskManager(backend, SQLiteTaskStore(path), _cfg(poll_interval=5)) as second:
        out = await second.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED
        await until(lambda: _count(backend, parent, 1))


async def test_server_down_ends_the_task_in_error_with_one_notice_then_fails_fast() -> None:
    """`task()` does not wait for the server: with the server down, the task is returned,
    then ends in error with the reason, and the parent hears once (when it can be told).
    Once a session creation could not reach the server, the next call tries before it
    returns: a clear error, and nothing stored, until the server answers again."""
    backend = InProcessBackend(Script())
    parent = str((await backend.create_session(title="parent"))["id"])
    config = _cfg(follow_events=False, notice_retry_initial=0.05, poll_interval=0.2)
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        backend.down = True
        text = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "x", "agent": "explore", "description": "down"},
        )
        (task,) = await manager.list(parent)
        assert text == (
            f"Background task started: `{task.id}`\nAgent: explore\nDescription: down\n"
            "Status: running\nYou will get a notice in this session when it completes or "
            "fails; continue with other work meanwhile. To wait for it now, call "
            f'`asyncagents_output(task_id="{task.id}", block=true)`.'
        )
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.ERROR and out.task.session_id is None
        assert out.task.error == (
            "creating the child session failed: in-process backend is down (test knob)"
        )
        refused = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "y", "agent": "explore", "description": "down again"},
        )
        assert refused == "Error: in-process backend is down (test knob)"
        assert [t.id for t in await manager.list(parent)] == [task.id]  # nothing stored
        backend.down = False
        await until(lambda: _count(backend, parent, 1), timeout=10)
        await asyncio.sleep(0.3)  # a notice pass later: still exactly one
        (notice,) = await notices_in(backend, parent)
        assert re.sub(r"ntc_[0-9a-f]+", "ntc_ID", notice) == (
            "[asyncagents notice ntc_ID]\n"
            f"Background task `{task.id}` failed: down\n"
            "Error: creating the child session failed: in-process backend is down (test knob)\n"
            f'Read it again with `asyncagents_output(task_id="{task.id}")`. Start a new '
            "asyncagents_task to try again.\n"
            "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), "
            "$0.00.\n\nYou have no background tasks still running."
        )
        # the server answers again: the next call creates its session before it returns
        # (the server is known to answer then), and the one after that in the background
        checked = await manager.task(parent, "z", "explore", "back")
        assert checked.session_id is not None
        assert (await manager.task(parent, "w", "explore", "background")).session_id is None


def test_notice_tag_is_json_safe() -> None:
    assert json.loads(json.dumps(notice_tag("ntc_1"))) == "[asyncagents notice ntc_1]"


class _NoRunBackend(InProcessBackend):
    """A server that accepts a prompt but never runs it: `errors` are published instead (an
    unknown agent or model), or nothing at all (a run lost in a server restart)."""

    def __init__(self, script: Script, errors: list[dict[str, object]]) -> None:
        super().__init__(script)
        self.errors = errors

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        if request.no_reply:
            await super().prompt_async(session_id, request)
            return
        for error in self.errors:
            self.publish("session.error", {"sessionID": session_id, "error": error})
        if self.errors:
            self.publish("session.idle", {"sessionID": session_id})


async def test_the_first_session_error_of_a_turn_is_its_reason(script: Script, parent: str) -> None:
    first = {"name": "UnknownError", "data": {"message": "Agent not found: nope"}}
    generic = {"name": "UnknownError", "data": {"message": "Error: stack trace\n at x.js:1"}}
    backend = _NoRunBackend(script, [first, generic])
    parent = str((await backend.create_session())["id"])
    async with TaskManager(backend, InMemoryTaskStore(), _cfg(poll_interval=0.1)) as manager:
        task = await manager.task(parent, "x", "nope", "bad agent")
        out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error == "UnknownError: Agent not found: nope"


async def test_a_run_the_server_lost_ends_in_error_after_the_stall_timeout(
    script: Script,
) -> None:
    backend = _NoRunBackend(script, [])
    parent = str((await backend.create_session())["id"])
    async with TaskManager(
        backend, InMemoryTaskStore(), _cfg(poll_interval=0.1, stall_timeout=0.5)
    ) as manager:
        task = await manager.task(parent, "x", "explore", "lost run")
        await asyncio.sleep(0.3)
        assert (await manager.output(task.id)).task.status is TaskStatus.RUNNING  # not yet
        out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error is not None and "stopped without finishing" in out.task.error


async def test_a_busy_quiet_run_is_not_a_stalled_one(
    backend: InProcessBackend, parent: str, script: Script
) -> None:
    async with TaskManager(
        backend, InMemoryTaskStore(), _cfg(poll_interval=0.1, stall_timeout=0.3)
    ) as manager:
        task = await manager.task(parent, "[hold] x", "explore", "quiet but busy")
        await asyncio.sleep(1.2)  # four stall timeouts without an event: still busy on the server
        assert (await manager.output(task.id)).task.status is TaskStatus.RUNNING
        script.release.set()
        out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.COMPLETED


class _EndsDuringStatus(InProcessBackend):
    """The turn ends between the manager's read of the messages and its status request."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.script = script

    async def status(self) -> Mapping[str, JSON]:
        self.script.release.set()
        while await super().status():
            await asyncio.sleep(0.01)
        return await super().status()


async def test_a_turn_that_ends_during_the_stall_check_completes(script: Script) -> None:
    backend = _EndsDuringStatus(script)
    parent = str((await backend.create_session())["id"])
    async with TaskManager(
        backend, InMemoryTaskStore(), _cfg(poll_interval=0.1, stall_timeout=0.2)
    ) as manager:
        task = await manager.task(parent, "[hold] x", "explore", "ends late")
        out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "Reply to: [hold] x"
