"""Runaway guards and accounting over HTTP, against the fake OpenCode server.

Each guard ends the task in ``error`` with its exact reason, aborts the child session, and tells
the parent exactly once; tokens and cost are the sums of the child's assistant messages.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessTurn,
    OpenCodeBackend,
    Task,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    run_tool,
)
from asyncagents.tasks.models import TaskUsage
from fake_opencode import FakeOpenCode, TagResponder
from parent_notices import notices_in
from polling import until

#: what every assistant message of the fake server records
STEP = {
    "tokens": {"input": 100, "output": 40, "reasoning": 5, "cache": {"read": 3, "write": 2}},
    "cost": 0.25,
}
STEP_USAGE = TaskUsage(
    input_tokens=100,
    output_tokens=40,
    reasoning_tokens=5,
    cache_read_tokens=3,
    cache_write_tokens=2,
    cost=0.25,
)


def times(n: int) -> TaskUsage:
    """`n` steps' usage."""
    out = TaskUsage()
    for _ in range(n):
        out = out + STEP_USAGE
    return out


class LoopResponder(TagResponder):
    """Adds ``[loop:N]``: N tool steps, then a hang that only an abort ends (no progress); and
    ``[steps:N]``: N tool steps 0.2 s apart, then the reply."""

    _LOOP = re.compile(r"\[loop:(\d+)\]")
    _STEPS = re.compile(r"\[steps:(\d+)\]")

    async def __call__(self, turn: InProcessTurn) -> str:
        steps = self._STEPS.search(turn.prompt)
        if steps:
            for index in range(int(steps.group(1))):
                await asyncio.sleep(0.2)
                await turn.tool("bash", {"command": f"echo {index}"}, str(index))
        found = self._LOOP.search(turn.prompt)
        if found:
            for index in range(int(found.group(1))):
                await turn.tool("bash", {"command": f"echo {index}"}, str(index))
                await asyncio.sleep(0.02)
            await asyncio.Event().wait()
        return await super().__call__(turn)


@pytest.fixture
def server() -> Iterator[FakeOpenCode]:
    with FakeOpenCode(LoopResponder(), heartbeat=0.5) as fake:
        fake.backend.step_usage = STEP
        yield fake


@pytest.fixture
async def backend(server: FakeOpenCode) -> AsyncIterator[OpenCodeBackend]:
    async with OpenCodeBackend(server.url, timeout=5.0) as client:
        yield client


@pytest.fixture
async def parent(backend: OpenCodeBackend) -> str:
    return str((await backend.create_session(title="guards"))["id"])


async def _manager(backend: OpenCodeBackend, **settings: Any) -> TaskManager:
    config = TaskManagerConfig.model_validate(
        {"poll_interval": 0.1, "notice_retry_initial": 0.05, "wake": "never", **settings}
    )
    manager = TaskManager(backend, InMemoryTaskStore(), config)
    await manager.start()
    await asyncio.wait_for(manager.events.connected.wait(), 10)
    return manager


async def _ended(manager: TaskManager, task: Task, timeout: float = 15) -> Task:
    out = await manager.output(task.id, block=True, timeout=timeout)
    assert not out.task.status.active, f"{task.id} still {out.task.status}"
    return out.task


async def _stopped_once(
    manager: TaskManager, backend: OpenCodeBackend, task: Task, parent: str, reason: str
) -> Task:
    """The task ended in error with `reason`, its session was aborted, and the parent got one
    notice saying so."""
    ended = await _ended(manager, task)
    assert ended.status is TaskStatus.ERROR
    assert ended.error == reason
    assert ended.session_id is not None
    await until(lambda: _not_busy(backend, ended.session_id or ""), what="session aborted")
    child = await backend.messages(ended.session_id)
    assert child[-1]["info"]["error"]["name"] == "MessageAbortedError"
    await until(lambda: _has_notice(backend, parent, task.id), what="the notice")
    await asyncio.sleep(0.5)  # several checks and notice passes later: still one
    mine = [n for n in await notices_in(backend, parent) if f"Background task `{task.id}`" in n]
    assert len(mine) == 1
    assert f"Background task `{task.id}` failed: guarded\nError: {reason}\n" in mine[0]
    return ended


async def _not_busy(backend: OpenCodeBackend, session_id: str) -> bool:
    return session_id not in await backend.status()


async def _has_notice(backend: OpenCodeBackend, parent: str, task_id: str) -> bool:
    return any(f"Background task `{task_id}`" in n for n in await notices_in(backend, parent))


async def test_a_hung_busy_turn_is_stopped_by_idle_timeout(
    backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend, idle_timeout=0.6, stall_timeout=60)
    try:
        task = await manager.task(parent, "[hold] hang", "general", "guarded")
        await asyncio.sleep(0.3)
        assert (await manager.output(task.id)).task.status is TaskStatus.RUNNING  # not yet
        await _stopped_once(
            manager,
            backend,
            task,
            parent,
            "stopped: no progress for 0.6 s while busy (idle_timeout)",
        )
    finally:
        await manager.close()


async def test_progress_keeps_a_turn_from_the_idle_timeout(
    backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend, idle_timeout=1.0)
    try:
        # twelve tool steps 0.2 s apart: 2.4 s in all, never 1 s without progress
        task = await manager.task(parent, "[steps:12] busy", "general", "guarded")
        ended = await _ended(manager, task)
        assert ended.status is TaskStatus.COMPLETED, ended.error
    finally:
        await manager.close()


async def test_a_long_turn_is_stopped_by_max_runtime(backend: OpenCodeBackend, parent: str) -> None:
    manager = await _manager(backend, max_runtime=1)
    try:
        task = await manager.task(parent, "[sleep:30] long", "general", "guarded")
        await _stopped_once(
            manager, backend, task, parent, "stopped: the turn ran for 1 s (max_runtime)"
        )
    finally:
        await manager.close()


async def test_a_tool_loop_is_stopped_by_max_tool_calls(
    backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend, max_tool_calls=3)
    try:
        task = await manager.task(parent, "[loop:4] spin", "general", "guarded")
        ended = await _stopped_once(
            manager,
            backend,
            task,
            parent,
            "stopped: 4 tool calls in this turn, over 3 (max_tool_calls)",
        )
        assert ended.progress.tool_calls == 4
    finally:
        await manager.close()


async def test_spend_guards_stop_at_the_tokens_and_cost_counted(
    backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend, max_tokens=400)
    try:
        task = await manager.task(parent, "[loop:3] spend", "general", "guarded")
        ended = await _stopped_once(
            manager, backend, task, parent, "stopped: 450 tokens used, over 400 (max_tokens)"
        )
        assert ended.usage == times(3)
    finally:
        await manager.close()
    manager = await _manager(backend, max_cost=0.6)
    try:
        task = await manager.task(parent, "[loop:3] spend", "general", "guarded")
        await _stopped_once(
            manager, backend, task, parent, "stopped: the task cost $0.75, over $0.60 (max_cost)"
        )
    finally:
        await manager.close()


async def test_the_tasks_of_a_tree_share_max_cost(backend: OpenCodeBackend, parent: str) -> None:
    manager = await _manager(backend, max_cost=1.0)
    try:
        first = await manager.task(parent, "[loop:3] first", "general", "guarded")

        async def first_counted() -> bool:
            stored = await manager.store.get(first.id)
            return stored is not None and stored.usage == times(3)

        await until(first_counted, what="the first task's cost stored while it runs")
        second = await manager.task(parent, "[loop:2] second", "general", "guarded")
        assert second.root_session_id == parent and second.depth == 1
        reason = (
            f"stopped: the tasks of session `{parent}` cost $1.25 together, over $1.00 (max_cost)"
        )
        await _stopped_once(manager, backend, second, parent, reason)
        await _stopped_once(manager, backend, first, parent, reason)
        # the tree's budget is spent: no new task starts in it, another tree is not concerned
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "more", "agent": "general"}
        )
        assert text == (
            f"Error: the tasks of session `{parent}` have cost $1.25 together, which reaches "
            "this service's max_cost of $1.00; no more tasks can start or resume in this tree."
        )
        assert len(await manager.list(parent)) == 2
        other = str((await backend.create_session(title="other"))["id"])
        elsewhere = await manager.task(other, "[sleep:0.05] fine", "general", "elsewhere")
        assert (await _ended(manager, elsewhere)).status is TaskStatus.COMPLETED
    finally:
        await manager.close()


async def test_the_call_may_lower_a_limit_but_not_raise_it(
    backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend)
    try:
        text = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "[loop:5] p", "agent": "general", "description": "x", "max_tool_calls": 500},
        )
        assert text == (
            "Error: max_tool_calls=500 is above this service's limit of 200; a task can only "
            "lower it. Leave max_tool_calls out, or give at most 200."
        )
        text = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "p", "agent": "general", "max_runtime": 0, "max_cost": "a lot"},
        )
        assert text == (
            "Error: invalid arguments for asyncagents_task:\n"
            "- max_runtime: must be more than 0 (got 0)\n"
            '- max_cost: must be a number (got "a lot")'
        )
        assert await manager.list(parent) == []
        await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {
                "prompt": "[loop:3] p",
                "agent": "general",
                "description": "guarded",
                "max_tool_calls": "2",
            },
        )
        (task,) = await manager.list(parent)
        assert task.limits.max_tool_calls == 2
        await _stopped_once(
            manager,
            backend,
            task,
            parent,
            "stopped: 3 tool calls in this turn, over 2 (max_tool_calls)",
        )
    finally:
        await manager.close()


async def test_a_task_not_started_yet_is_not_stopped_by_time_guards(
    backend: OpenCodeBackend, parent: str
) -> None:
    """The turn's clocks start when its prompt is accepted, not while its fork is built."""

    class Slow:
        text = "inherited"
        stats = None

    def slow_fork(raw: bytes, config: object = None) -> Slow:
        import time

        time.sleep(1.5)
        return Slow()

    config = TaskManagerConfig(
        poll_interval=0.1, wake="never", max_runtime=1.0, idle_timeout=0.5, stall_timeout=60
    )
    async with TaskManager(backend, InMemoryTaskStore(), config, fork_builder=slow_fork) as mgr:
        task = await mgr.task(parent, "[sleep:0.1] quick", "general", "forked", fork=True)
        ended = await _ended(mgr, task)
        assert ended.status is TaskStatus.COMPLETED, ended.error


async def test_usage_is_counted_live_and_kept_over_resumes(
    server: FakeOpenCode, backend: OpenCodeBackend, parent: str
) -> None:
    manager = await _manager(backend)
    try:
        task = await manager.task(parent, "[tool][hold] work", "general", "counted")

        async def one_step_stored() -> bool:
            stored = await manager.store.get(task.id)
            return stored is not None and stored.usage == times(1)

        await until(one_step_stored, what="the tool step's usage stored while it runs")
        running = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
        assert running.endswith(
            "\nUsage: 150 tokens (input 100, output 40, reasoning 5, cache read 3, cache write "
            "2), $0.25."
        )
        server.release()
        first = await _ended(manager, task)
        assert first.status is TaskStatus.COMPLETED
        assert first.usage == first.turn_usage == times(2)  # the tool step and the reply
        assert first.usage_by_model == {"inprocess/inprocess": times(2)}
        await manager.task(parent, "[tool] more", "", "", resume=task.id)
        second = await _ended(manager, task)
        assert second.status is TaskStatus.COMPLETED
        assert second.turn_usage == times(2) and second.usage == times(4)
        assert second.usage_by_model == {"inprocess/inprocess": times(4)}
        text = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
        assert text.endswith(
            "\nUsage: this turn 300 tokens (input 200, output 80, reasoning 10, cache read 6, "
            "cache write 4), $0.50; all turns 600 tokens (input 400, output 160, reasoning 20, "
            "cache read 12, cache write 8), $1.00."
        )
        listing = await run_tool(manager, parent, "asyncagents_list", {})
        assert listing == (
            f"Background tasks (newest first):\n- `{task.id}` (resumed) [completed] general: "
            "counted (600 tokens, $1.00)"
        )
        await until(lambda: _notices(backend, parent, 2), what="two notices")
        notices = await notices_in(backend, parent)
        assert (
            "\nUsage: 300 tokens (input 200, output 80, reasoning 10, cache read 6, cache write "
            "4), $0.50.\n\nYou have "
        ) in notices[0]
        assert (
            "\nUsage: this turn 300 tokens (input 200, output 80, reasoning 10, cache read 6, "
            "cache write 4), $0.50; all turns 600 tokens (input 400, output 160, reasoning 20, "
            "cache read 12, cache write 8), $1.00.\n\nYou have no background tasks still running."
        ) in notices[1]
    finally:
        await manager.close()


async def _notices(backend: OpenCodeBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n
