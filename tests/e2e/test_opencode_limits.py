"""Tokens, cost and runaway guards against a real ``opencode serve``.

The fake model reports usage on every step (some of it cached, some reasoning) and is priced in
the server's config, so OpenCode stores tokens and a cost on each assistant message and sums
them on the session: ours must equal them. A model stream that hangs and a tool loop are stopped
by their guards, and the child session is aborted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    OpenCodeBackend,
    Task,
    TaskManager,
    TaskStatus,
)
from asyncagents.tasks.models import TaskUsage
from e2e_support import AGENT, manager_config, until
from parent_notices import notices_in
from polling import session_of


@pytest.fixture
async def guarded(backend: OpenCodeBackend) -> AsyncIterator[TaskManager]:
    """A manager that checks its runs twice a second, with small guards."""
    config = manager_config(
        poll_interval=0.5, notice_retry_initial=0.2, idle_timeout=3, max_tool_calls=3
    )
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        yield manager


def _session_usage(session: dict[str, Any]) -> TaskUsage:
    """The sums OpenCode keeps on a session."""
    tokens = session["tokens"]
    return TaskUsage(
        input_tokens=tokens["input"],
        output_tokens=tokens["output"],
        reasoning_tokens=tokens["reasoning"],
        cache_read_tokens=tokens["cache"]["read"],
        cache_write_tokens=tokens["cache"]["write"],
        cost=session["cost"],
    )


def _same(ours: TaskUsage, theirs: TaskUsage) -> None:
    """Equal counts; the cost equal up to the order of a float sum."""
    assert ours.model_dump(exclude={"cost"}) == theirs.model_dump(exclude={"cost"})
    assert ours.cost == pytest.approx(theirs.cost, rel=1e-9, abs=1e-12)


async def test_tokens_and_cost_equal_what_opencode_stored_over_a_resume(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await manager.task(parent, "[fake:tool] count me", AGENT, "counted")
    first = (await manager.output(task.id, block=True, timeout=60)).task
    assert first.status is TaskStatus.COMPLETED, first.error
    task.session_id = await session_of(manager, task.id)
    session = await backend.get_session(task.session_id)
    one_turn = _session_usage(session)
    assert one_turn.cost > 0 and one_turn.cache_read_tokens > 0 and one_turn.reasoning_tokens > 0
    _same(first.usage, one_turn)
    _same(first.turn_usage, one_turn)
    assert set(first.usage_by_model) == {"fake/fake-model"}
    stored = [m["info"] for m in await backend.messages(task.session_id)]
    assert sum(1 for i in stored if i["role"] == "assistant") == 2  # the tool step, the reply

    await manager.task(parent, "and again", "", "", resume=task.id)
    second = (await manager.output(task.id, block=True, timeout=60)).task
    assert second.status is TaskStatus.COMPLETED, second.error
    both = _session_usage(await backend.get_session(task.session_id))
    _same(second.usage, both)
    last = [m["info"] for m in await backend.messages(task.session_id)][-1]
    _same(
        second.turn_usage,
        TaskUsage(
            input_tokens=last["tokens"]["input"],
            output_tokens=last["tokens"]["output"],
            reasoning_tokens=last["tokens"]["reasoning"],
            cache_read_tokens=last["tokens"]["cache"]["read"],
            cache_write_tokens=last["tokens"]["cache"]["write"],
            cost=last["cost"],
        ),
    )
    _same(second.usage_by_model["fake/fake-model"], both)


async def _stopped(manager: TaskManager, backend: OpenCodeBackend, task: Task) -> Task:
    ended = (await manager.output(task.id, block=True, timeout=60)).task
    assert ended.status is TaskStatus.ERROR
    assert ended.session_id is not None
    sid = ended.session_id

    async def aborted() -> bool:
        if sid in await backend.status():
            return False
        last = (await backend.messages(sid))[-1]["info"]
        return bool((last.get("error") or {}).get("name") == "MessageAbortedError")

    await until(aborted, what="the child session aborted")
    return ended


async def _one_notice(backend: OpenCodeBackend, parent: str, task: Task, reason: str) -> None:
    async def told() -> bool:
        return any(f"Background task `{task.id}`" in n for n in await notices_in(backend, parent))

    await until(told, what="the notice")
    await asyncio.sleep(1.5)  # checks and notice passes later: still one
    mine = [n for n in await notices_in(backend, parent) if f"Background task `{task.id}`" in n]
    assert len(mine) == 1
    assert f"failed: guarded\nError: {reason}\n" in mine[0]


async def test_a_model_that_streams_nothing_is_stopped_by_idle_timeout(
    guarded: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await guarded.task(parent, "[fake:hang=60] wait", AGENT, "guarded")
    ended = await _stopped(guarded, backend, task)
    reason = "stopped: no progress for 3 s while busy (idle_timeout)"
    assert ended.error == reason
    assert ended.completed_at is not None and ended.turn_started_at is not None
    assert 3000 <= ended.completed_at - ended.turn_started_at < 20000
    await _one_notice(backend, parent, task, reason)


async def test_a_tool_loop_is_stopped_by_max_tool_calls(
    guarded: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await guarded.task(parent, "[fake:loop] spin", AGENT, "guarded")
    ended = await _stopped(guarded, backend, task)
    reason = "stopped: 4 tool calls in this turn, over 3 (max_tool_calls)"
    assert ended.error == reason
    assert ended.progress.tool_calls == 4
    assert ended.usage.cost > 0  # the steps it made were counted
    await _one_notice(backend, parent, task, reason)
