"""Follow-ups to a running task on a real ``opencode serve``: queued and interrupting."""

from __future__ import annotations

from typing import Any

from asyncagents.tasks import OpenCodeBackend, TaskManager, TaskStatus
from asyncagents.tasks.tools import run_tool
from e2e_support import AGENT, model_got, until
from fake_model import FakeModel
from parent_notices import texts
from polling import session_of


def _users(messages: list[dict[str, Any]]) -> list[str]:
    return ["".join(texts(m)) for m in messages if m["info"]["role"] == "user"]


async def _ended(manager: TaskManager, task_id: str, resumes: int) -> bool:
    task = await manager.store.get(task_id)
    return task is not None and task.status is TaskStatus.COMPLETED and task.resume_count == resumes


async def test_a_follow_up_queued_while_the_child_runs_is_answered_next(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    first = "[fake:delay=3] first job"
    task = await manager.task(parent, first, AGENT, "queued follow-up")
    await until(lambda: model_got(fake_model, first), what="the child running")
    text = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": "then this", "resume": task.id, "when": "after_current"},
    )
    assert text == (
        f"Follow-up queued for background task `{task.id}`: queued follow-up\nIt is sent when "
        "the running turn ends (1 follow-up(s) queued). You will get a notice with its response."
    )
    await until(lambda: _ended(manager, task.id, 1), 60, "the follow-up answered")
    final = await manager.store.get(task.id)
    assert final is not None and final.result == "Reply to: then this"
    task.session_id = await session_of(manager, task.id)
    messages = await backend.messages(task.session_id)
    assert _users(messages) == [first, "then this"]
    assistants = [m for m in messages if m["info"]["role"] == "assistant"]
    assert [texts(m) for m in assistants] == [[f"Reply to: {first}"], ["Reply to: then this"]]


async def test_now_aborts_the_running_turn_and_sends_the_follow_up(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    slow = "[fake:slow] long job"
    task = await manager.task(parent, slow, AGENT, "interrupted")
    await until(lambda: model_got(fake_model, slow), what="the child streaming")
    text = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": "stop and do this", "resume": task.id, "when": "now"},
    )
    assert text == (
        f"Follow-up for background task `{task.id}`: interrupted\nIts running turn is being "
        "aborted; the follow-up is sent as soon as it stops. You will get a notice with its "
        "response."
    )
    await until(lambda: _ended(manager, task.id, 1), 60, "the follow-up answered")
    final = await manager.store.get(task.id)
    assert final is not None and final.result == "Reply to: stop and do this"
    task.session_id = await session_of(manager, task.id)
    messages = await backend.messages(task.session_id)
    assert _users(messages) == [slow, "stop and do this"]
    aborted = [m["info"] for m in messages if m["info"].get("error")]
    assert [a["error"]["name"] for a in aborted] == ["MessageAbortedError"]
    assert messages[-1]["info"]["role"] == "assistant"
    assert texts(messages[-1]) == ["Reply to: stop and do this"]
