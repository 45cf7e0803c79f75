"""Resuming tasks against a real ``opencode serve``: follow-ups, notices, rejections."""

from __future__ import annotations

import asyncio

import pytest
from asyncagents.tasks import (
    ForkResumeConflictError,
    OpenCodeBackend,
    SessionExpiredError,
    TaskBeingResumedError,
    TaskManager,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskStatus,
    run_tool,
)
from e2e_support import AGENT, has_notices, until
from parent_notices import notices_in, texts
from polling import session_of


async def test_resume_continues_the_child_and_tells_the_parent_once(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await manager.task(parent, "first question", AGENT, "resumable")
    first = await manager.output(task.id, block=True, timeout=60)
    assert first.task.status is TaskStatus.COMPLETED, first.task.error
    assert first.task.result == "Reply to: first question"
    await until(lambda: has_notices(backend, parent, 1), what="completion notice")

    follow = "[fake:delay=2] and the follow-up " + "y" * 3000
    loop = asyncio.get_running_loop()
    begin = loop.time()
    resumed = await manager.task(parent, follow, "", "", resume=task.id)
    assert loop.time() - begin < 1.5
    assert resumed.status is TaskStatus.RESUMED and resumed.resume_count == 1
    assert resumed.id == task.id and resumed.session_id == first.task.session_id
    with pytest.raises(TaskBeingResumedError):
        await manager.task(parent, "too soon", "", "", resume=task.id)
    # the model answers after 2 s: the follow-up is still running now
    assert (await manager.output(task.id)).task.status is TaskStatus.RESUMED

    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == f"Reply to: {follow}"  # only the follow-up turn's reply
    assert out.task.result_retrieved_at is not None
    await until(lambda: has_notices(backend, parent, 2), what="resume notice")
    await asyncio.sleep(1.5)  # a notice pass later: still exactly two
    notices = await notices_in(backend, parent)
    assert len(notices) == 2
    assert f"Background task `{task.id}` completed: resumable" in notices[0]
    assert f"Background task `{task.id}` (resumed) answered your follow-up" in notices[1]
    assert f"Full response:\nReply to: {follow}\n" in notices[1]

    # the child session holds both turns, in order
    task.session_id = await session_of(manager, task.id)
    child = await backend.messages(task.session_id)
    assert [t for m in child for t in texts(m)] == [
        "first question",
        "Reply to: first question",
        follow,
        f"Reply to: {follow}",
    ]
    listing = await run_tool(manager, parent, "asyncagents_list", {})
    assert f"- `{task.id}` (resumed) [completed] {AGENT}: resumable" in listing


async def test_resume_rejections(manager: TaskManager, parent: str) -> None:
    running = await manager.task(parent, "[fake:delay=3] slow one", AGENT, "still running")
    with pytest.raises(TaskNotCompletedError, match="still running"):
        await manager.task(parent, "more", "", "", resume=running.id)
    with pytest.raises(ForkResumeConflictError):
        await manager.task(parent, "more", AGENT, "d", fork=True, resume=running.id)
    with pytest.raises(TaskNotFoundError):
        await manager.task(parent, "more", "", "", resume="tsk_does_not_exist")
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "more", "resume": running.id}
    )
    assert text.startswith(f"Error: Only completed tasks can be resumed; task `{running.id}`")
    out = await manager.output(running.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED


async def test_resume_of_a_deleted_child_session_is_refused(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await manager.task(parent, "short job", AGENT, "will be deleted")
    assert (await manager.output(task.id, block=True, timeout=60)).task.status is (
        TaskStatus.COMPLETED
    )
    task.session_id = await session_of(manager, task.id)
    await backend.delete_session(task.session_id)
    with pytest.raises(SessionExpiredError, match=f"its session `{task.session_id}` no longer"):
        await manager.task(parent, "more", "", "", resume=task.id)
    # the refusal changed nothing: the task is still completed with its result
    out = await manager.output(task.id)
    assert out.task.status is TaskStatus.COMPLETED
    assert out.task.result == "Reply to: short job" and out.task.resume_count == 0
