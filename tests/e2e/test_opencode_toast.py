"""The plugin's TUI toasts, end to end: OpenCode with the plugin installed by ``asyncagents
opencode install``, ``asyncagents serve``, the fake model calling the tools. A task that
completes, or is cancelled, shows a toast (OpenCode publishes it as ``tui.toast.show`` on its
event stream, which the TUI draws), exactly once, also when it ends while the service restarts
(the plugin reconnects at the next tool call and reads the service's snapshot)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asyncagents.service import load_or_create_token
from asyncagents.tasks import OpenCodeBackend
from e2e_support import AGENT, until
from plugin_support import (
    ServiceProcess,
    call,
    new_parent,
    next_tool_output,
    notices_of,
    say_to,
    started_task_id,
    tool_outputs,
)
from test_opencode_plugin import (  # noqa: F401  (the same module fixtures, a server of our own)
    oc,
    plugin_opencode,
    plugin_root,
    service,
    service_port,
)


@pytest.fixture
async def toasts(oc: OpenCodeBackend) -> AsyncIterator[list[dict[str, Any]]]:  # noqa: F811
    """The ``tui.toast.show`` events OpenCode publishes while the test runs."""
    seen: list[dict[str, Any]] = []
    connected = asyncio.Event()

    async def follow() -> None:
        async for event in oc.events():
            connected.set()
            if event.get("type") == "tui.toast.show":
                seen.append(event.get("properties") or {})

    job = asyncio.ensure_future(follow())
    await asyncio.wait_for(connected.wait(), 30)
    yield seen
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await job


async def test_toasts_when_a_task_completes_and_when_one_is_cancelled(
    service: ServiceProcess,  # noqa: F811
    oc: OpenCodeBackend,  # noqa: F811
    toasts: list[dict[str, Any]],
) -> None:
    parent = await new_parent(oc)
    await say_to(
        oc,
        parent,
        call("asyncagents_task", {"prompt": "say hi", "agent": AGENT, "description": "quick"}),
    )
    quick = started_task_id((await tool_outputs(oc, parent, "asyncagents_task"))[-1])

    def toast_for(task_id: str) -> dict[str, Any] | None:
        return next((t for t in toasts if task_id in str(t.get("message"))), None)

    await until(lambda: toast_for(quick) is not None, 60, "a toast for the completed task")
    assert toast_for(quick) == {
        "title": "asyncagents",
        "message": f'Background task "quick" completed ({quick}).',
        "variant": "success",
        "duration": 6000,
    }

    # The completion notice wakes the parent with a turn of its own. A prompt that meets it
    # (sent while the notice's turn runs, or just before the notice arrives) is folded into
    # one turn, which the fake model answers by its last user message: the call would be
    # lost. So the next prompt waits for the notice's turn to end.
    async def notice_answered() -> bool:
        if not any(task == quick for _, task in await notices_of(oc, parent)):
            return False
        last = (await oc.messages(parent))[-1]["info"]
        done = last["role"] == "assistant" and (last.get("time") or {}).get("completed")
        return bool(done) and parent not in await oc.status()

    await until(notice_answered, 60, "the parent's turn for the completion notice")
    await say_to(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:slow] take your time", "agent": AGENT, "description": "slow"},
        ),
    )
    slow = started_task_id(await next_tool_output(oc, parent, "asyncagents_task", 1))
    await say_to(oc, parent, call("asyncagents_cancel", {"task_id": slow}))
    await until(lambda: toast_for(slow) is not None, 60, "a toast for the cancelled task")
    assert toast_for(slow) == {
        "title": "asyncagents",
        "message": f'Background task "slow" was cancelled ({slow}).',
        "variant": "warning",
        "duration": 6000,
    }
    assert len([t for t in toasts if quick in str(t.get("message"))]) == 1


#: the plugin's waits between reconnects: 1, 2, 4, 8, 16, then 30 s; it tries at about 1, 3, 7,
#: 15, 31 and 61 s after a drop. A service back after 34 s is found by the next tool call, or by
#: the plugin itself at about 61 s
DOWN_SECONDS = 34


async def _task_status(svc: ServiceProcess, task_id: str) -> str:
    token, _ = load_or_create_token(svc.state / "asyncagents" / "token")
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as http:
        answer = await http.get(
            f"/v1/tasks/{task_id}", headers={"authorization": f"Bearer {token}"}
        )
    assert answer.status_code == 200, answer.text
    status: str = answer.json()["status"]
    return status


async def test_a_task_that_ends_while_the_service_is_down_gets_one_toast_at_the_next_call(
    service: ServiceProcess,  # noqa: F811
    oc: OpenCodeBackend,  # noqa: F811
    toasts: list[dict[str, Any]],
) -> None:
    parent = await new_parent(oc)

    def toasts_for(task_id: str) -> list[dict[str, Any]]:
        return [t for t in toasts if task_id in str(t.get("message"))]

    await say_to(
        oc,
        parent,
        call("asyncagents_task", {"prompt": "say hi", "agent": AGENT, "description": "before"}),
    )
    before = started_task_id((await tool_outputs(oc, parent, "asyncagents_task"))[-1])
    await until(lambda: toasts_for(before) != [], 60, "the toast of the first task")

    async def notice_answered(task_id: str) -> bool:
        if not any(task == task_id for _, task in await notices_of(oc, parent)):
            return False
        last = (await oc.messages(parent))[-1]["info"]
        done = last["role"] == "assistant" and (last.get("time") or {}).get("completed")
        return bool(done) and parent not in await oc.status()

    await until(lambda: notice_answered(before), 60, "the parent's turn for the first notice")
    await say_to(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:delay=3] later", "agent": AGENT, "description": "while down"},
        ),
    )
    later = started_task_id(await next_tool_output(oc, parent, "asyncagents_task", 1))
    assert service.stop(signal.SIGTERM) == 0
    stopped = time.monotonic()
    await asyncio.sleep(DOWN_SECONDS)
    service.start()
    # the new service adopts the task and finds it completed in OpenCode

    async def completed() -> bool:
        return await _task_status(service, later) == "completed"

    await until(completed, 60, "the restarted service to record the completion")
    assert toasts_for(later) == [], "the plugin reconnected by itself"
    # a tool call (from another session: the parent is busy with its notice) reconnects the
    # plugin at once; its own next try is about 61 s after the stop
    other = await new_parent(oc)
    await say_to(oc, other, call("asyncagents_list", {}))
    await until(lambda: toasts_for(later) != [], 15, "the toast of the task that ended meanwhile")
    assert time.monotonic() - stopped < 58, "too slow to tell the tool call's reconnect apart"
    assert toasts_for(later) == [
        {
            "title": "asyncagents",
            "message": f'Background task "while down" completed ({later}).',
            "variant": "success",
            "duration": 6000,
        }
    ]
    # a little later: no second toast for either task (the snapshot showed both as completed)
    await asyncio.sleep(3)
    assert len(toasts_for(later)) == 1
    assert len(toasts_for(before)) == 1
