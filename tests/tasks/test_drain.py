"""Acknowledged tasks run once across a stop or a crash.

A graceful `close` waits for the prompts being sent; a task whose prompt may not have reached
the server is started again by its next owner, with the same message id, so the child holds its
prompt once and answers it once, whether the first send arrived or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from asyncagents.tasks import (
    InProcessBackend,
    PromptRequest,
    Task,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    TaskStore,
)
from asyncagents.tasks.models import message_id_after

CONFIG = TaskManagerConfig(
    poll_interval=0.2, notice_retry_initial=0.05, wake="never", lease_ttl=0.5
)


def user_prompts(backend: InProcessBackend, session_id: str, text: str) -> int:
    """User messages of the session whose text is `text`."""
    return sum(
        m["info"]["role"] == "user" and m["parts"][0].get("text") == text
        for m in backend._messages[session_id]
    )


def replies(backend: InProcessBackend, session_id: str) -> int:
    return sum(m["info"]["role"] == "assistant" for m in backend._messages[session_id])


def slow_sends(backend: InProcessBackend, seconds: float) -> list[str]:
    """Hold every prompt_async `seconds` before it reaches the backend; returns the sessions
    whose send arrived, in order."""
    arrived: list[str] = []
    real: Callable[[str, PromptRequest], Awaitable[None]] = backend.prompt_async

    async def prompt_async(session_id: str, request: PromptRequest) -> None:
        await asyncio.sleep(seconds)
        await real(session_id, request)
        arrived.append(session_id)

    backend.prompt_async = prompt_async  # type: ignore[method-assign]
    return arrived


async def ended(manager: TaskManager, task_id: str, timeout: float = 10.0) -> Task:
    result = await manager.output(task_id, block=True, timeout=timeout)
    assert not result.timed_out, result.task
    return result.task


async def test_close_waits_for_the_prompts_being_sent(
    backend: InProcessBackend, store: TaskStore, parent: str
) -> None:
    arrived = slow_sends(backend, 0.5)
    manager = TaskManager(backend, store, CONFIG)
    tasks = [await manager.task(parent, f"job {i}", agent="build") for i in range(5)]
    await manager.close()
    stored = [await store.get(t.id) for t in tasks]
    assert sorted(arrived) == sorted(str(t and t.session_id) for t in stored)
    for task in stored:
        assert task is not None and task.turn_started_at is not None
    async with TaskManager(backend, store, CONFIG) as again:
        for task in tasks:
            done = await ended(again, task.id)
            assert done.status is TaskStatus.COMPLETED, done
            assert done.session_id is not None
            assert user_prompts(backend, done.session_id, task.prompt) == 1


async def test_a_send_cut_off_by_the_drain_deadline_is_sent_again_once(
    backend: InProcessBackend, store: TaskStore, parent: str
) -> None:
    slow_sends(backend, 30.0)
    config = CONFIG.model_copy(update={"drain_timeout": 0.2})
    await backend.prompt(parent, PromptRequest(text="the parent's own work"))
    manager = TaskManager(backend, store, config)
    task = await manager.task(parent, "cut off", agent="build", fork=True)
    await manager.close()
    stored = await store.get(task.id)
    assert stored is not None and stored.status is TaskStatus.RUNNING
    assert stored.turn_started_at is None
    backend.prompt_async = InProcessBackend.prompt_async.__get__(backend)  # type: ignore[method-assign]
    async with TaskManager(backend, store, config) as again:
        done = await ended(again, task.id)
    assert done.status is TaskStatus.COMPLETED, done
    assert done.result == "Reply to: cut off"
    assert done.session_id is not None
    assert user_prompts(backend, done.session_id, "cut off") == 1
    # the fork context was injected once, before the prompt, and the turn is the prompt's
    messages = backend._messages[done.session_id]
    assert [m["info"]["id"] for m in messages[:2]] == [
        done.context_message_id,
        done.prompt_message_id,
    ]
    assert done.turn_after_message_id == done.context_message_id


async def test_a_prompt_that_arrived_before_a_crash_is_not_sent_again(
    backend: InProcessBackend, store: TaskStore, parent: str
) -> None:
    """A dead owner sent the prompt but never recorded it: the new owner only records it."""
    session = await backend.create_session(parent_id=parent, title="child")
    sid = str(session["id"])
    task = Task(
        id="tsk_crashed",
        parent_session_id=parent,
        session_id=sid,
        prompt="sent, unrecorded",
        last_prompt="sent, unrecorded",
        agent="build",
        description="crashed",
        prompt_message_id=message_id_after(None, session["time"]["created"], "c0"),
        backend=backend.name,
        owner="mgr_dead",  # holds no lease
    )
    await store.open()
    await store.insert(task)
    sent = PromptRequest(text=task.prompt, message_id=task.prompt_message_id)
    await backend.prompt_async(sid, sent)
    sends = [p for p in backend.prompts if p[0] == sid]
    async with TaskManager(backend, store, CONFIG) as heir:
        done = await ended(heir, task.id)
    assert done.status is TaskStatus.COMPLETED
    assert done.result == "Reply to: sent, unrecorded"
    assert done.owner == heir.instance_id
    assert [p for p in backend.prompts if p[0] == sid] == sends  # nothing was sent again
    assert user_prompts(backend, sid, task.prompt) == 1
    assert replies(backend, sid) == 1


async def test_an_unsent_follow_up_is_sent_by_the_next_owner(
    backend: InProcessBackend, store: TaskStore, parent: str
) -> None:
    config = CONFIG.model_copy(update={"drain_timeout": 0.1})
    async with TaskManager(backend, store, config) as first:
        task = await first.task(parent, "first turn", agent="build")
        await ended(first, task.id)
        arrived = slow_sends(backend, 30.0)
        resumed = await first.task(parent, "second turn", resume=task.id)
        assert resumed.status is TaskStatus.RESUMED
    assert arrived == []
    backend.prompt_async = InProcessBackend.prompt_async.__get__(backend)  # type: ignore[method-assign]
    async with TaskManager(backend, store, CONFIG) as second:
        done = await ended(second, task.id)
    assert done.status is TaskStatus.COMPLETED, done
    assert done.result == "Reply to: second turn"
    assert done.session_id is not None
    assert user_prompts(backend, done.session_id, "second turn") == 1
    assert replies(backend, done.session_id) == 2


async def test_the_same_message_id_sent_twice_is_one_message_answered_once(
    backend: InProcessBackend,
) -> None:
    session = await backend.create_session(title="child")
    sid = str(session["id"])
    message_id = message_id_after(None, session["time"]["created"], "a1")
    request = PromptRequest(text="only once", message_id=message_id)
    await backend.prompt_async(sid, request)
    await backend.prompt_async(sid, request)  # while the first runs
    for _ in range(100):
        if replies(backend, sid):
            break
        await asyncio.sleep(0.01)
    await backend.prompt_async(sid, request)  # after it was answered
    await asyncio.sleep(0.1)
    assert user_prompts(backend, sid, "only once") == 1
    assert replies(backend, sid) == 1
    assert backend._messages[sid][0]["info"]["id"] == message_id
    assert backend._messages[sid][0]["parts"][0]["id"] == "prt" + message_id[3:]


@pytest.mark.parametrize(
    ("previous", "later"),
    [
        # OpenCode's own ids: 12 hex digits of (ms * 0x1000 + counter) mod 2**48, 14 base62
        ("msg_203803d9d001OIPCF6myEYjLrx", "msg_203803d9d002AAAAAAAAAAAAAA"),
        ("msg_203803d9d001OIPCF6myEYjLrx", "msg_203803dc2001UOIjF5xrluJVpE"),
    ],
)
def test_a_chosen_id_sorts_between_the_previous_message_and_any_later_one(
    previous: str, later: str
) -> None:
    chosen = message_id_after(previous, 0, "ffee12")
    assert previous < chosen < later


def test_the_first_id_of_a_session_sorts_before_any_id_the_server_makes() -> None:
    created = 1_795_356_114_333
    chosen = message_id_after(None, created, "0a")
    first = f"msg_{(created * 0x1000 + 1) % (1 << 48):012x}OIPCF6myEYjLrx"
    assert chosen.startswith("msg_") and chosen < first
