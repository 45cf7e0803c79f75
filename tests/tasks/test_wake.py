"""Notices wake the parent: one prompt per batch, its own agent and model, the exact texts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from asyncagents.tasks import (
    BackendUnavailableError,
    InMemoryTaskStore,
    InProcessBackend,
    NoticeKind,
    PromptRequest,
    Task,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from asyncagents.tasks.models import Notice
from asyncagents.tasks.notices import format_delivery, format_notice, running_line
from parent_notices import deliveries_in, notices_in
from polling import until
from tasks_script import Script

PLAN_MODEL = {"providerID": "prov", "modelID": "m-1"}


def _config(**kw: object) -> TaskManagerConfig:
    return TaskManagerConfig.model_validate({"poll_interval": 0.2, **kw})


async def _parent(backend: InProcessBackend) -> str:
    """A parent whose last turn ran as agent "plan" on PLAN_MODEL."""
    parent = str((await backend.create_session(title="parent"))["id"])
    await backend.prompt(parent, PromptRequest(text="start", agent="plan", model=PLAN_MODEL))
    return parent


def _bodies(backend: InProcessBackend, parent: str) -> list[dict[str, object]]:
    """The prompts sent to the parent after its first one."""
    return [body for sid, body in backend.prompts if sid == parent][1:]


def _text(body: dict[str, object]) -> str:
    parts = body["parts"]
    assert isinstance(parts, list)
    return str(parts[0]["text"])


@pytest.fixture
async def wake_manager(
    backend: InProcessBackend, request: pytest.FixtureRequest
) -> AsyncIterator[TaskManager]:
    wake = getattr(request, "param", "each")
    async with TaskManager(backend, InMemoryTaskStore(), _config(wake=wake)) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 5)
        yield manager


def test_running_line_texts() -> None:
    assert running_line(0) == "You have no background tasks still running."
    assert running_line(1) == "You have 1 background task still running."
    assert running_line(7) == "You have 7 background tasks still running."


def _task(**kw: object) -> Task:
    base: dict[str, object] = {
        "id": "tsk_1",
        "parent_session_id": "ses_p",
        "prompt": "p",
        "agent": "explore",
        "description": "look around",
    }
    return Task.model_validate({**base, **kw})


def test_notice_texts_are_exact() -> None:
    done = _task(status=TaskStatus.COMPLETED, result="All good.")
    assert format_notice("ntc_1", done, NoticeKind.COMPLETED) == (
        "[asyncagents notice ntc_1]\nBackground task `tsk_1` completed: look around\n"
        'Result:\nAll good.\n\nRead it again with `asyncagents_output(task_id="tsk_1")`. '
        'Continue it with `asyncagents_task(resume="tsk_1", prompt=...)`.'
    )
    failed = _task(status=TaskStatus.ERROR, error="APIError: boom", is_forked=True)
    assert format_notice("ntc_2", failed, NoticeKind.ERROR) == (
        "[asyncagents notice ntc_2]\nBackground task `tsk_1` (forked) failed: look around\n"
        'Error: APIError: boom\nRead it again with `asyncagents_output(task_id="tsk_1")`. '
        "Start a new asyncagents_task to try again."
    )
    answered = _task(status=TaskStatus.COMPLETED, result="More.", resume_count=1)
    assert format_notice("ntc_3", answered, NoticeKind.RESUME_COMPLETED) == (
        "[asyncagents notice ntc_3]\nBackground task `tsk_1` (resumed) answered your follow-up: "
        "look around\nFull response:\nMore.\n\n"
        'Read it again with `asyncagents_output(task_id="tsk_1")`.'
    )
    followup_failed = _task(
        status=TaskStatus.COMPLETED, result="Old.", resume_count=1, error="APIError: boom"
    )
    assert format_notice("ntc_4", followup_failed, NoticeKind.RESUME_FAILED) == (
        "[asyncagents notice ntc_4]\nBackground task `tsk_1` (resumed) could not answer your "
        "follow-up: look around\nError: APIError: boom\nThe task is completed again and keeps "
        'its previous result. Read it again with `asyncagents_output(task_id="tsk_1")`. Resume it '
        'with `asyncagents_task(resume="tsk_1", prompt=...)`.'
    )


def test_one_delivery_joins_its_notices_and_ends_with_the_running_count() -> None:
    notices = [
        Notice(task_id="t", parent_session_id="p", kind=NoticeKind.COMPLETED, turn=1, text=t)
        for t in ("first", "second")
    ]
    assert format_delivery(notices, 2) == (
        "first\n\nsecond\n\nYou have 2 background tasks still running."
    )


async def test_each_wakes_the_parent_with_its_own_agent_and_model(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    task = await wake_manager.task(parent, "child job", "explore", "one")
    await wake_manager.output(task.id, block=True, timeout=5)
    await until(lambda: len(_bodies(backend, parent)) == 1, what="wake prompt")
    (body,) = _bodies(backend, parent)
    assert body["agent"] == "plan" and body["model"] == PLAN_MODEL
    assert "noReply" not in body
    (notice,) = await notices_in(backend, parent)
    assert notice.endswith("\n\nYou have no background tasks still running.")
    assert f"Background task `{task.id}` completed: one\nResult:\nReply to: child job\n" in notice
    # the parent's agent answered the wake prompt
    await until(lambda: sum(t.session_id == parent for t in script.seen) == 2, what="answer")
    await asyncio.sleep(0.3)
    assert len(_bodies(backend, parent)) == 1  # exactly once


async def test_notices_wait_while_the_parent_is_busy_then_come_in_one_prompt(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    await backend.prompt_async(parent, PromptRequest(text="[hold] parent works", agent="plan"))
    await until(lambda: any(t.prompt == "[hold] parent works" for t in script.seen))
    tasks = [await wake_manager.task(parent, f"job {i}", "explore", f"d{i}") for i in range(3)]
    for task in tasks:
        await wake_manager.output(task.id, block=True, timeout=5)
    await asyncio.sleep(0.5)
    assert len(_bodies(backend, parent)) == 1  # only the parent's own held prompt
    script.release.set()
    await until(lambda: len(_bodies(backend, parent)) == 2, what="one wake prompt")
    wake = _text(_bodies(backend, parent)[1])
    assert all(f"Background task `{t.id}` completed" in wake for t in tasks)
    assert wake.count("[asyncagents notice ") == 3
    assert wake.endswith("\n\nYou have no background tasks still running.")
    await asyncio.sleep(0.5)
    assert len(_bodies(backend, parent)) == 2


async def test_each_says_how_many_still_run(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    slow = await wake_manager.task(parent, "[hold] slow", "explore", "slow")
    quick = await wake_manager.task(parent, "quick", "explore", "quick")
    await wake_manager.output(quick.id, block=True, timeout=5)
    await until(lambda: len(_bodies(backend, parent)) == 1, what="first wake")
    first = _text(_bodies(backend, parent)[0])
    assert quick.id in first and slow.id not in first
    assert first.endswith("\n\nYou have 1 background task still running.")
    script.release.set()
    await until(lambda: len(_bodies(backend, parent)) == 2, what="second wake")
    second = _text(_bodies(backend, parent)[1])
    assert slow.id in second and second.endswith("You have no background tasks still running.")


@pytest.mark.parametrize("wake_manager", ["all_done"], indirect=True)
async def test_all_done_wakes_once_when_the_last_task_ends(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    slow = await wake_manager.task(parent, "[hold] slow", "explore", "slow")
    quick = await wake_manager.task(parent, "quick", "explore", "quick")
    await wake_manager.output(quick.id, block=True, timeout=5)
    await asyncio.sleep(0.6)
    assert _bodies(backend, parent) == []  # one still runs: no wake yet
    script.release.set()
    await wake_manager.output(slow.id, block=True, timeout=5)
    await until(lambda: len(_bodies(backend, parent)) == 1, what="the one wake")
    wake = _text(_bodies(backend, parent)[0])
    assert wake.index(quick.id) < wake.index(slow.id)  # oldest first
    assert wake.endswith("\n\nYou have no background tasks still running.")
    assert _bodies(backend, parent)[0]["agent"] == "plan"
    await asyncio.sleep(0.5)
    assert len(_bodies(backend, parent)) == 1


@pytest.mark.parametrize("wake_manager", ["never"], indirect=True)
async def test_never_adds_the_notice_without_a_reply(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    task = await wake_manager.task(parent, "job", "explore", "quiet")
    await wake_manager.output(task.id, block=True, timeout=5)
    await until(lambda: len(_bodies(backend, parent)) == 1, what="notice")
    (body,) = _bodies(backend, parent)
    assert body["noReply"] is True
    assert _text(body).endswith("\n\nYou have no background tasks still running.")
    await asyncio.sleep(0.3)
    assert sum(t.session_id == parent for t in script.seen) == 1  # no answer to it


class _LostAnswer(InProcessBackend):
    """The wake prompt is accepted and answered, but the answer to the HTTP call is lost."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.lose: set[str] = set()

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        await super().prompt_async(session_id, request)
        if session_id in self.lose:
            self.lose.discard(session_id)
            raise BackendUnavailableError("connection reset after the request was sent")


async def test_an_answered_wake_whose_reply_was_lost_is_not_sent_again(script: Script) -> None:
    backend = _LostAnswer(script)
    parent = await _parent(backend)
    backend.lose.add(parent)
    config = _config(notice_retry_initial=0.05)
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        task = await manager.task(parent, "job", "explore", "lost answer")
        await manager.output(task.id, block=True, timeout=5)
        await until(lambda: _none_pending(manager), what="notice settled")
        await asyncio.sleep(0.5)
    assert len(_bodies(backend, parent)) == 1
    assert len(await deliveries_in(backend, parent)) == 1


async def _none_pending(manager: TaskManager) -> bool:
    return not await manager.store.notices()
