"""Provider errors on a real ``opencode serve``: OpenCode's own retry shown, our tries again,
a fallback model, and a non-retryable error ending the task at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asyncagents.tasks import InMemoryTaskStore, OpenCodeBackend, TaskManager, TaskStatus
from asyncagents.tasks.tools import run_tool
from e2e_support import AGENT, SMALL_MODEL, manager_config, until
from fake_model import FakeModel
from parent_notices import notices_in, texts
from polling import session_of


@pytest.fixture
async def retrying(backend: OpenCodeBackend) -> AsyncIterator[TaskManager]:
    config = manager_config(
        poll_interval=30.0,
        notice_retry_initial=0.2,
        retry_initial=0.5,
        retry_max=2.0,
        fallback_models=(SMALL_MODEL,),
    )
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        yield manager


def _users(messages: list[dict[str, Any]]) -> list[str]:
    return ["".join(texts(m)) for m in messages if m["info"]["role"] == "user"]


async def _ended(manager: TaskManager, task_id: str) -> bool:
    task = await manager.store.get(task_id)
    return task is not None and not task.status.pending


async def _notices(backend: OpenCodeBackend, parent: str) -> list[str]:
    await until(lambda: _has_notice(backend, parent), 30, "the notice")
    await asyncio.sleep(1.0)  # a second notice would come now
    return await notices_in(backend, parent)


async def _has_notice(backend: OpenCodeBackend, parent: str) -> bool:
    return bool(await notices_in(backend, parent))


async def test_two_429s_are_absorbed_by_opencode_and_shown_while_they_last(
    retrying: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:429=2] absorbed"
    task = await retrying.task(parent, prompt, AGENT, "absorbed")
    seen: list[str] = []

    async def shows_retry() -> bool:
        text = await run_tool(retrying, parent, "asyncagents_output", {"task_id": task.id})
        seen.append(text)
        return "OpenCode is retrying the provider: attempt " in text

    await until(shows_retry, 30, "the retry shown")
    assert any("(Rate limited: slow down)" in t for t in seen if "retrying" in t), seen
    await until(lambda: _ended(retrying, task.id), 60, "the end")
    final = await retrying.store.get(task.id)
    assert final is not None and final.status is TaskStatus.COMPLETED, final
    assert final.tries == [] and final.result == f"Reply to: {prompt}"
    assert fake_model.rate_limited[prompt] == 2
    (notice,) = await _notices(backend, parent)
    assert (
        "\nAttempts: 1 (1 on fake/fake-model); OpenCode retried the provider 2 time(s) in the "
        f"last one\nResult:\nReply to: {prompt}\n" in notice
    )


async def test_when_opencode_gives_up_our_try_again_finishes_it(
    retrying: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:429=8] given up once"
    task = await retrying.task(parent, prompt, AGENT, "tried again")
    await until(lambda: _ended(retrying, task.id), 90, "the end")
    final = await retrying.store.get(task.id)
    assert final is not None and final.status is TaskStatus.COMPLETED, final
    assert final.tries == [None, None]
    assert fake_model.rate_limited[prompt] == 8
    task.session_id = await session_of(retrying, task.id)
    messages = await backend.messages(task.session_id)
    assert _users(messages) == [prompt, prompt]
    errors = [m["info"]["error"] for m in messages if m["info"].get("error")]
    assert [(e["name"], e["data"]["statusCode"]) for e in errors] == [("APIError", 429)]
    (notice,) = await _notices(backend, parent)
    assert (
        "\nAttempts: 2 (2 on fake/fake-model); OpenCode retried the provider 2 time(s) in the "
        "last one\nResult:\n" in notice
    )


async def test_a_fallback_model_finishes_after_the_first_fails_three_times(
    retrying: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    prompt = "[fake:429-on=fake-model] needs a fallback"
    task = await retrying.task(parent, prompt, AGENT, "fallback", model="fake/fake-model")
    await until(lambda: _ended(retrying, task.id), 180, "the end")
    final = await retrying.store.get(task.id)
    assert final is not None and final.status is TaskStatus.COMPLETED, final
    assert final.tries == ["fake/fake-model"] * 3 + [SMALL_MODEL]
    assert final.model == SMALL_MODEL and final.result == f"Reply to: {prompt}"
    (notice,) = await _notices(backend, parent)
    assert (
        f"\nModel: {SMALL_MODEL}\nAttempts: 4 (3 on fake/fake-model, 1 on {SMALL_MODEL})\n"
        "Result:\n" in notice
    )


async def test_a_non_retryable_400_ends_the_task_at_once(
    retrying: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    task = await retrying.task(parent, "[fake:fail400] rejected", AGENT, "bad request")
    out = await retrying.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR and out.task.tries == []
    task.session_id = await session_of(retrying, task.id)
    assert _users(await backend.messages(task.session_id)) == ["[fake:fail400] rejected"]


async def test_done_when_a_chosen_model_survives_429s_and_a_follow_up_is_answered_next(
    retrying: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    """The issue's whole story: a child on a chosen model, failed twice with 429 by its
    provider, finishes; the parent is told once, naming the model and the attempts; a follow-up
    sent while the child ran is answered next."""
    prompt = "[fake:429=2] the whole story"
    task = await retrying.task(parent, prompt, AGENT, "story", model=SMALL_MODEL)
    text = await run_tool(
        retrying,
        parent,
        "asyncagents_task",
        {"prompt": "and the follow-up", "resume": task.id, "when": "after_current"},
    )
    assert text.startswith(f"Follow-up queued for background task `{task.id}`: story\n")

    async def both_answered() -> bool:
        current = await retrying.store.get(task.id)
        return (
            current is not None
            and current.status is TaskStatus.COMPLETED
            and current.resume_count == 1
        )

    await until(both_answered, 90, "the turn and its follow-up")
    assert fake_model.rate_limited[prompt] == 2
    await until(lambda: _count(backend, parent, 2), 30, "two notices")
    await asyncio.sleep(1.0)
    first, second = await notices_in(backend, parent)
    assert (
        f"Background task `{task.id}` completed: story\nModel: {SMALL_MODEL}\n"
        f"Attempts: 1 (1 on {SMALL_MODEL}); OpenCode retried the provider 2 time(s) in the last "
        f"one\nResult:\nReply to: {prompt}\n" in first
    )
    assert (
        f"Background task `{task.id}` (resumed) answered your follow-up: story\n"
        f"Model: {SMALL_MODEL}\nFull response:\nReply to: and the follow-up\n" in second
    )


async def _count(backend: OpenCodeBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def test_a_try_again_waits_in_the_queue_and_the_cap_holds_meanwhile(
    backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    """``max_running=1`` and two tasks: the first one's turn ends on a 429 OpenCode gave up on,
    so its try again gives up the slot and waits in the queue; the second task runs in that
    slot, then the try again, never both (OpenCode's busy sessions sampled every 50 ms)."""
    config = manager_config(
        poll_interval=30.0,
        notice_retry_initial=0.2,
        retry_initial=0.5,
        retry_max=0.5,
        max_running=1,
        admission_interval=60.0,
    )
    first = "[fake:429=8] waits for the slot"
    second = "[fake:delay=3] runs meanwhile"
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        a = await manager.task(parent, first, AGENT, "tried again")
        b = await manager.task(parent, second, AGENT, "meanwhile")
        assert (a.status, b.status) == (TaskStatus.RUNNING, TaskStatus.QUEUED)
        # both sessions are created right away, in the background (a queued task's too)
        sessions = {await session_of(manager, a.id), await session_of(manager, b.id)}
        most = 0
        samples = 0
        waiting: list[str] = []

        async def sample() -> None:
            nonlocal most, samples
            while True:
                busy = await backend.status()
                most = max(most, len(sessions & set(busy)))
                samples += 1
                await asyncio.sleep(0.05)

        async def a_waits() -> bool:
            task = await manager.store.get(a.id)
            if task is None or task.status is not TaskStatus.QUEUED:
                return False
            waiting.append(await run_tool(manager, parent, "asyncagents_output", {"task_id": a.id}))
            return True

        sampler = asyncio.get_running_loop().create_task(sample())
        try:
            await until(a_waits, 60, "the try again waiting in the queue")
            await until(lambda: _ended(manager, a.id), 120, "the try again answered")
            await until(lambda: _ended(manager, b.id), 60, "the other task")
        finally:
            sampler.cancel()
        final_a, final_b = await manager.store.get(a.id), await manager.store.get(b.id)
    assert final_a is not None and final_b is not None
    assert final_a.status is TaskStatus.COMPLETED and final_a.tries == [None, None], final_a
    assert final_b.status is TaskStatus.COMPLETED, final_b
    assert fake_model.rate_limited[first] == 8
    # the other task ran while the try again waited: it ended before the try was admitted
    assert final_b.completed_at is not None and final_a.admitted_at is not None
    assert final_b.admitted_at is not None and final_b.completed_at <= final_a.admitted_at
    assert samples > 50 and most == 1
    lines = waiting[0].splitlines()
    assert lines[0] == f"Task `{a.id}` [queued] {AGENT}: tried again"
    assert lines[1].startswith("Waiting in the queue: position 1 in the queue; ")
    assert lines[2].startswith("Try 2 on the server's default model")
    assert lines[2].endswith(", after a provider error: APIError: Rate limited: slow down")
    assert lines[3:5] == [
        "The next try starts by itself: continue with other work (you will get a notice), or "
        "call asyncagents_output again with block=true to wait.",
        "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00.",
    ]
    assert final_a.session_id is not None
    assert _users(await backend.messages(final_a.session_id)) == [first, first]
