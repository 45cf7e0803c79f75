"""Seed behaviours: failed follow-ups, resume without agent, id prefixes, listeners."""

from __future__ import annotations

import asyncio

import pytest
from asyncagents.tasks import (
    AmbiguousTaskIdError,
    InProcessBackend,
    Task,
    TaskChange,
    TaskManager,
    TaskNotFoundError,
    TaskStatus,
)
from asyncagents.tasks.models import now_ms
from asyncagents.tasks.transitions import (
    FOLLOWUP_CANCELLED,
    cancelled,
    finished,
    fork_prepared,
    resumed,
    started,
)
from parent_notices import notices_in
from polling import session_of, until
from tasks_script import Script

NO_TOKENS = "0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00"


async def test_a_failed_follow_up_returns_the_task_to_completed(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    task = await manager.task(parent, "first", "explore", "follow-ups")
    await manager.output(task.id, block=True, timeout=5)
    await manager.task(parent, "[fail] second", resume=task.id)
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.COMPLETED
    assert out.task.result == "Reply to: first"  # the last good result
    assert out.task.error == "APIError: Invalid request: rejected by the provider"
    await until(lambda: _count(backend, parent, 2))
    notice = (await notices_in(backend, parent))[1]
    tag = notice.splitlines()[0]
    assert notice == (
        f"{tag}\nBackground task `{task.id}` (resumed) could not answer your follow-up: "
        "follow-ups\nError: APIError: Invalid request: rejected by the provider\n"
        "The task is completed again and keeps its previous result. Read it again with "
        f'`asyncagents_output(task_id="{task.id}")`. Resume it with '
        f'`asyncagents_task(resume="{task.id}", prompt=...)`.\n'
        f"Usage: this turn {NO_TOKENS}; all turns {NO_TOKENS}.\n\n"
        "You have no background tasks still running."
    )
    # and it can be resumed again
    await manager.task(parent, "third", resume=task.id)
    again = await manager.output(task.id, block=True, timeout=5)
    assert again.task.status is TaskStatus.COMPLETED and again.task.error is None
    assert again.task.result == "Reply to: third" and again.task.resume_count == 2


async def test_a_cancelled_follow_up_returns_the_task_to_completed(
    manager: TaskManager, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "first", "explore", "cancel follow-up")
    await manager.output(task.id, block=True, timeout=5)
    await manager.task(parent, "[hold] second", resume=task.id)
    await until(lambda: len(script.seen) == 2)
    cancelled = await manager.cancel(task.id)
    assert cancelled.status is TaskStatus.COMPLETED
    assert cancelled.result == "Reply to: first" and cancelled.error == FOLLOWUP_CANCELLED
    await asyncio.sleep(0.3)
    current = (await manager.output(task.id)).task
    assert current.status is TaskStatus.COMPLETED and current.result == "Reply to: first"


async def test_resume_needs_no_agent_or_description(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    task = await manager.task(parent, "first", "explore", "d")
    await manager.output(task.id, block=True, timeout=5)
    resumed = await manager.task(parent, "again", resume=task.id)
    assert resumed.status is TaskStatus.RESUMED
    await manager.output(task.id, block=True, timeout=5)
    child = await session_of(manager, task.id)
    bodies = [body for sid, body in backend.prompts if sid == child]
    assert bodies[-1]["agent"] == "explore"  # the task's own agent


async def test_task_ids_may_be_a_unique_prefix(manager: TaskManager, parent: str) -> None:
    first = await manager.task(parent, "one", "explore", "one")
    second = await manager.task(parent, "two", "explore", "two")
    for task in (first, second):
        await manager.output(task.id, block=True, timeout=5)
    common = _common_prefix(first.id, second.id)
    unique = first.id[: len(common) + 1]
    assert (await manager.output(unique)).task.id == first.id
    resumed = await manager.task(parent, "more", resume=unique)
    assert resumed.id == first.id
    await manager.output(first.id, block=True, timeout=5)
    with pytest.raises(AmbiguousTaskIdError) as err:
        await manager.output(common)
    ids = ", ".join(f"`{task_id}`" for task_id in sorted([first.id, second.id]))
    assert str(err.value) == (
        f"Task id `{common}` is ambiguous; it matches several tasks: {ids}. "
        "Give more characters of the id."
    )
    with pytest.raises(TaskNotFoundError):
        await manager.output("tsk_nothing_like_it")
    with pytest.raises(TaskNotFoundError):
        await manager.output("")
    # another parent's tasks are not candidates
    with pytest.raises(TaskNotFoundError):
        await manager.output(unique, parent_session_id="ses_other")


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while a[n] == b[n]:
        n += 1
    return a[:n]


async def test_listeners_see_every_stored_change(
    manager: TaskManager, parent: str, script: Script
) -> None:
    seen: list[tuple[str, str, TaskStatus]] = []

    def listener(change: TaskChange) -> None:
        seen.append((change.kind, change.task.id, change.task.status))

    def broken(change: TaskChange) -> None:
        raise RuntimeError("a listener that fails does not stop the others")

    manager.add_listener(broken)
    manager.add_listener(listener)
    task = await manager.task(parent, "[tool][hold] first", "explore", "watched")
    # the tool call's event is seen while the turn runs: once it has ended (a check may
    # prove that from the messages before the event stream is read), there is no run to show
    await until(lambda: len(seen) == 4)
    script.release.set()
    await manager.output(task.id, block=True, timeout=5)
    script.release.clear()
    await manager.task(parent, "[hold] again", resume=task.id)
    await until(lambda: len(script.seen) == 2)
    await manager.cancel(task.id)
    await manager.clear(parent)
    manager.remove_listener(listener)
    manager.remove_listener(listener)  # twice: nothing
    await manager.task(parent, "unseen", "explore", "after removal")
    t, run, done, resumed = task.id, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.RESUMED
    queued = TaskStatus.QUEUED
    assert seen == [
        ("task.created", t, run),  # admitted at once: told once, running
        ("task.updated", t, run),  # its child session was created
        ("task.updated", t, run),  # the prompt was accepted
        ("task.updated", t, run),  # a tool call seen
        ("task.completed", t, done),
        ("task.updated", t, done),  # the result was read
        ("task.resumed", t, queued),  # the follow-up is queued
        ("task.updated", t, resumed),  # admitted
        ("task.updated", t, resumed),  # its prompt was accepted
        ("task.cancelled", t, done),  # a cancelled follow-up: completed again
        ("task.cleared", t, done),
    ]


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def test_messages_of_the_child_turn_whole_or_tail(
    manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    backend.add_message(parent, "user", "context for the fork")
    task = await manager.task(parent, "first", "explore", "messages", fork=True)
    await manager.output(task.id, block=True, timeout=10)
    await manager.task(parent, "second", resume=task.id[:-2])
    await manager.output(task.id, block=True, timeout=5)

    def texts(messages: list[dict[str, object]]) -> list[str]:
        return [str(m["parts"][0]["text"])[:30] for m in messages]  # type: ignore[index]

    whole = await manager.messages(task.id, full_session=True)
    assert texts(whole)[1:] == ["first", "Reply to: first", "second", "Reply to: second"]
    assert "<inherited_context>" in str(whole[0]["parts"][0]["text"])  # type: ignore[index]
    assert texts(await manager.messages(task.id)) == ["second", "Reply to: second"]
    since = str(whole[2]["info"]["id"])  # type: ignore[index]
    assert texts(await manager.messages(task.id, since_message_id=since)) == [
        "second",
        "Reply to: second",
    ]
    tail = await manager.messages(task.id, full_session=True, message_limit=1)
    assert texts(tail) == ["Reply to: second"]
    assert await manager.messages(task.id, message_limit=0) == []
    with pytest.raises(TaskNotFoundError):
        await manager.messages(task.id, parent_session_id="ses_other")


def test_every_change_moves_updated_at_forward_even_behind_the_last_writers_clock() -> None:
    ahead = now_ms() + 60_000  # the last change came from a host whose clock is a minute ahead
    running = Task(
        id="tsk_1", parent_session_id="ses_p", prompt="p", agent="general", description="d",
        updated_at=ahead,
    )  # fmt: skip
    done = running.model_copy(update={"status": TaskStatus.COMPLETED})
    forking = running.model_copy(update={"status": TaskStatus.QUEUED, "fork_pending": True})
    for mutation, task in [
        (started(1, None), running),
        (fork_prepared("msg_1", {"kept": 1}), forking),
        (finished(1, TaskStatus.COMPLETED, text="ok"), running),
        (cancelled(), running),
        (resumed("again", None, "owner"), done),
    ]:
        out = mutation(task.model_copy(deep=True))
        assert out is not None and out[0].updated_at == ahead + 1
    now = now_ms()
    late = running.model_copy(update={"updated_at": now - 60_000})
    out = cancelled()(late)
    assert out is not None and out[0].updated_at >= now
