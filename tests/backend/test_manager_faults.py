"""The task manager over `OpenCodeBackend` while a proxy in front of OpenCode answers HTML 404
pages: nothing is taken for deleted, no task is lost, every notice arrives once (issue 9,
defect 3: "a proxy answering an HTML 404 page for three seconds made `asyncagents_list` say
'No background tasks found'")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    OpenCodeBackend,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    run_tool,
)
from fake_opencode import FakeOpenCode
from parent_notices import notices_in
from polling import session_of, until

WINDOW = 3.0


@pytest.fixture
async def manager(server: FakeOpenCode, backend: OpenCodeBackend) -> AsyncIterator[TaskManager]:
    config = TaskManagerConfig(
        poll_interval=0.2, notice_retry_initial=0.05, notice_retry_max=0.5, wake="never"
    )
    async with TaskManager(backend, InMemoryTaskStore(), config) as mgr:
        await asyncio.wait_for(mgr.events.connected.wait(), 10)
        yield mgr


async def launch(manager: TaskManager, parent: str, prompt: str) -> str:
    reply = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": prompt, "agent": "general", "description": "survive the proxy"},
    )
    assert reply.startswith("Background task started:"), reply
    (task,) = await manager.list(parent)
    return task.id


async def listing(manager: TaskManager, parent: str) -> str:
    return await run_tool(manager, parent, "asyncagents_list", {})


async def listed(manager: TaskManager, task_id: str, status: str) -> str:
    task = await manager.store.get(task_id)
    assert task is not None
    return (
        f"Background tasks (newest first):\n- `{task.id}` [{status}] general: survive the proxy "
        "(0 tokens, $0.00)"
    )


async def test_html_404_on_every_session_call_for_3s_changes_nothing(
    server: FakeOpenCode, backend: OpenCodeBackend, manager: TaskManager
) -> None:
    parent = str((await backend.create_session(title="parent"))["id"])
    task_id = await launch(manager, parent, "work [hold]")
    child = await child_of(manager, task_id)
    await until(lambda: server.call(lambda b: b.status()).get(child) is not None)

    added = time.monotonic()
    server.add_fault("/session/", "html404", seconds=WINDOW)
    server.release()  # the turn ends inside the window: the manager cannot read it yet
    while time.monotonic() - added < WINDOW - 0.3:
        manager.reconcile()  # checks read the child's messages: HTML 404 pages
        assert await listing(manager, parent) == await listed(manager, task_id, "running")
        await asyncio.sleep(0.2)

    await until(
        lambda: status_is(manager, task_id, TaskStatus.COMPLETED),
        timeout=15,
        what="the task completes after the window",
    )
    task = await manager.store.get(task_id)
    assert task is not None and task.result == "Reply to: work [hold]"
    await until(lambda: notice_count(backend, parent, 1), timeout=15, what="one notice")
    assert await listing(manager, parent) == await listed(manager, task_id, "completed")
    await asyncio.sleep(0.5)
    assert len(await notices_in(backend, parent)) == 1


async def test_html_404_on_the_parent_for_3s_delays_the_notice_and_keeps_the_tasks(
    server: FakeOpenCode, backend: OpenCodeBackend, manager: TaskManager
) -> None:
    parent = str((await backend.create_session(title="parent"))["id"])
    added = time.monotonic()
    fault = server.add_fault(f"/session/{parent}", "html404", seconds=WINDOW)
    task_id = await launch(manager, parent, "quick")
    await until(
        lambda: status_is(manager, task_id, TaskStatus.COMPLETED),
        timeout=10,
    )
    while time.monotonic() - added < WINDOW - 0.3:
        assert await listing(manager, parent) == await listed(manager, task_id, "completed")
        await asyncio.sleep(0.2)
    assert fault.hits >= 2, "the notice delivery met the proxy's 404 pages"
    await asyncio.sleep(max(0.0, WINDOW + 0.1 - (time.monotonic() - added)))
    await until(lambda: notice_count(backend, parent, 1), timeout=15, what="one notice")
    assert await listing(manager, parent) == await listed(manager, task_id, "completed")
    await asyncio.sleep(0.5)
    notices = await notices_in(backend, parent)
    assert len(notices) == 1 and "survive the proxy" in notices[0]


async def status_is(manager: TaskManager, task_id: str, status: TaskStatus) -> bool:
    task = await manager.store.get(task_id)
    return task is not None and task.status is status


async def child_of(manager: TaskManager, task_id: str) -> str:
    """The task's child session (created in the background after `task()` returned)."""
    return await session_of(manager, task_id)


async def notice_count(backend: OpenCodeBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) == n


async def test_a_redirect_on_prompt_async_ends_the_task_in_error_not_running(
    server: FakeOpenCode, backend: OpenCodeBackend, manager: TaskManager
) -> None:
    parent = str((await backend.create_session(title="parent"))["id"])
    server.add_fault(r"/session/[^/]+/prompt_async", "redirect", count=1)
    task_id = await launch(manager, parent, "never sent")
    await until(
        lambda: status_is(manager, task_id, TaskStatus.ERROR),
        timeout=10,
        what="the launch fails",
    )
    task = await manager.store.get(task_id)
    assert task is not None and task.error is not None
    assert task.error.startswith("sending the prompt failed: OpenCode server at ")
    assert "with a redirect (HTTP 302 to http://127.0.0.1:9/elsewhere)" in task.error
    # nothing reached the child; the parent got the error notice
    await until(lambda: notice_count(backend, parent, 1), timeout=10, what="one notice")
    assert [sid for sid, _ in server.backend.prompts] == [parent]
    assert await listing(manager, parent) == await listed(manager, task_id, "error")
