"""The task manager against a real ``opencode serve``: launch, completion, output, notices."""

from __future__ import annotations

import asyncio

from asyncagents.tasks import InMemoryTaskStore, OpenCodeBackend, TaskManager, TaskStatus
from e2e_support import AGENT, has_notices, manager_config, until
from fake_model import FAIL_MESSAGE
from parent_notices import notices_in
from polling import session_of


async def test_launch_returns_at_once_then_completes(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    prompt = "[fake:delay=3] summarise the plan"
    loop = asyncio.get_running_loop()
    begin = loop.time()
    task = await manager.task(parent, prompt, AGENT, "delayed reply")
    assert loop.time() - begin < 2.0
    assert task.status is TaskStatus.RUNNING
    # its child session is created in the background: the task id is the handle
    assert task.parent_session_id == parent and task.session_id is None
    session = await backend.get_session(await session_of(manager, task.id))
    assert session["parentID"] == parent
    # the model answers after 3 s: the task is still running now
    assert (await manager.output(task.id)).task.status is TaskStatus.RUNNING

    out = await manager.output(task.id, block=True, timeout=60)
    assert not out.timed_out
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == f"Reply to: {prompt}"
    assert out.task.result_retrieved_at is not None
    assert out.task.error is None
    await until(lambda: has_notices(backend, parent, 1), what="completion notice")
    (notice,) = await notices_in(backend, parent)
    assert f"Background task `{task.id}` completed: delayed reply" in notice
    assert f"Result:\nReply to: {prompt}\n" in notice


async def test_tool_step_task_completes_with_final_text(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await manager.task(parent, "[fake:tool] run it", AGENT, "tool step")
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "Tool step done. Reply to: [fake:tool] run it"
    assert out.task.progress.tool_calls == 1
    assert out.task.progress.last_tool == "bash"
    assert out.task.progress.steps == 2


async def test_provider_error_ends_in_error_and_tells_the_parent(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await manager.task(parent, "[fake:fail400] do it", AGENT, "will fail")
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error is not None and FAIL_MESSAGE in out.task.error
    assert out.task.error.startswith("APIError: ")
    await until(lambda: has_notices(backend, parent, 1), what="error notice")
    (notice,) = await notices_in(backend, parent)
    assert f"Background task `{task.id}` failed: will fail" in notice
    assert FAIL_MESSAGE in notice


async def test_unknown_agent_ends_in_error_with_the_servers_reason(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    # OpenCode accepts the prompt (204), stores no message and reports the reason only in
    # session.error events (a clear one, then a second one with a stack trace)
    task = await manager.task(parent, "hello", "no-such-agent", "bad agent")
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error == (
        'UnknownError: Agent not found: "no-such-agent". Available agents: '
        "build, explore, general, plan"
    )
    await until(lambda: has_notices(backend, parent, 1), what="error notice")
    (notice,) = await notices_in(backend, parent)
    assert 'Agent not found: "no-such-agent"' in notice and "    at " not in notice


async def test_unknown_model_ends_in_error_with_the_servers_reason(
    backend: OpenCodeBackend, parent: str
) -> None:
    # the user message is stored, no assistant message follows: only events tell the reason
    model = {"providerID": "fake", "modelID": "no-such-model"}
    async with TaskManager(
        backend, InMemoryTaskStore(), manager_config(poll_interval=30.0, model=model)
    ) as mgr:
        task = await mgr.task(parent, "hello", AGENT, "bad model")
        out = await mgr.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.error == (
        "UnknownError: Model not found: fake/no-such-model. Did you mean: fake-model?"
    )
