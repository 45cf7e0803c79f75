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
from asyncagents.tasks.notices import build_notice, format_delivery, format_notice, running_line
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


ZERO = "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."


def test_notice_texts_are_exact() -> None:
    done = _task(
        status=TaskStatus.COMPLETED,
        result="All good.",
        usage={
            "input_tokens": 1200,
            "output_tokens": 300,
            "reasoning_tokens": 40,
            "cache_read_tokens": 5000,
            "cache_write_tokens": 7,
            "cost": 0.01234,
        },
    )
    assert format_notice("ntc_1", done, NoticeKind.COMPLETED) == (
        "[asyncagents notice ntc_1]\nBackground task `tsk_1` completed: look around\n"
        'Result:\nAll good.\n\nRead it again with `asyncagents_output(task_id="tsk_1")`. '
        'Continue it with `asyncagents_task(resume="tsk_1", prompt=...)`.\n'
        "Usage: 6,547 tokens (input 1,200, output 300, reasoning 40, cache read 5,000, cache "
        "write 7), $0.0123."
    )
    failed = _task(status=TaskStatus.ERROR, error="APIError: boom", is_forked=True)
    assert format_notice("ntc_2", failed, NoticeKind.ERROR) == (
        "[asyncagents notice ntc_2]\nBackground task `tsk_1` (forked) failed: look around\n"
        'Error: APIError: boom\nRead it again with `asyncagents_output(task_id="tsk_1")`. '
        f"Start a new asyncagents_task to try again.\n{ZERO}"
    )
    answered = _task(
        status=TaskStatus.COMPLETED,
        result="More.",
        resume_count=1,
        usage={"input_tokens": 30, "output_tokens": 12, "cost": 2.5},
        turn_usage={"input_tokens": 20, "output_tokens": 2, "cost": 0.5},
    )
    assert format_notice("ntc_3", answered, NoticeKind.RESUME_COMPLETED) == (
        "[asyncagents notice ntc_3]\nBackground task `tsk_1` (resumed) answered your follow-up: "
        "look around\nFull response:\nMore.\n\n"
        'Read it again with `asyncagents_output(task_id="tsk_1")`.\n'
        "Usage: this turn 22 tokens (input 20, output 2, reasoning 0, cache read 0, cache write "
        "0), $0.50; all turns 42 tokens (input 30, output 12, reasoning 0, cache read 0, cache "
        "write 0), $2.50."
    )
    followup_failed = _task(
        status=TaskStatus.COMPLETED, result="Old.", resume_count=1, error="APIError: boom"
    )
    zero_turns = ZERO.replace("Usage: ", "Usage: this turn ").replace(
        "$0.00.",
        "$0.00; all turns 0 tokens (input 0, output 0, reasoning 0, cache read 0, "
        "cache write 0), $0.00.",
    )
    assert format_notice("ntc_4", followup_failed, NoticeKind.RESUME_FAILED) == (
        "[asyncagents notice ntc_4]\nBackground task `tsk_1` (resumed) could not answer your "
        "follow-up: look around\nError: APIError: boom\nThe task is completed again and keeps "
        'its previous result. Read it again with `asyncagents_output(task_id="tsk_1")`. Resume it '
        f'with `asyncagents_task(resume="tsk_1", prompt=...)`.\n{zero_turns}'
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


def _done(task_id: str, result: str) -> Task:
    return _task(id=task_id, status=TaskStatus.COMPLETED, result=result)


def _cut_line(task_id: str, total: int) -> str:
    return (
        f"The result above is cut; it has {total:,} characters. Read all of it with "
        f'`asyncagents_output(task_id="{task_id}")`.'
    )


def test_a_notice_carries_a_bounded_head_and_tail_of_the_result() -> None:
    result = "a" * 3500 + "b" * 1500
    text = format_notice("ntc_1", _done("tsk_1", result), NoticeKind.COMPLETED, 4000)
    assert (
        "Result:\n" + "a" * 3200 + "\n...[truncated 1000 chars]...\n" + "b" * 800 + "\n"
        f"{_cut_line('tsk_1', 5000)}\n\nRead it again with"
    ) in text
    fits = format_notice("ntc_2", _done("tsk_2", "c" * 4000), NoticeKind.COMPLETED, 4000)
    assert "Result:\n" + "c" * 4000 + "\n\nRead it again with" in fits


def test_a_delivery_of_many_notices_is_bounded_as_a_whole() -> None:
    results = {"tsk_a": "a" * 3000, "tsk_b": "b" * 100, "tsk_c": "c" * 2000 + "C" * 3000}
    notices = [
        build_notice(f"ntc_{tid}", _done(tid, result), NoticeKind.COMPLETED, 4000)
        for tid, result in results.items()
    ]
    text = format_delivery(notices, 0, 4000)
    # 4,000 characters shared: the short one whole, the two others 1,950 each
    assert "Result:\n" + "b" * 100 + "\n\nRead it again" in text
    assert (
        "Result:\n" + "a" * 1560 + "\n...[truncated 1050 chars]...\n" + "a" * 390 + "\n"
        f"{_cut_line('tsk_a', 3000)}\n\n"
    ) in text
    assert (
        "Result:\n" + "c" * 1560 + "\n...[truncated 3050 chars]...\n" + "C" * 390 + "\n"
        f"{_cut_line('tsk_c', 5000)}\n\n"
    ) in text
    assert [text.index(f"[asyncagents notice ntc_{tid}]") >= 0 for tid in results]
    assert text.endswith("\n\nYou have no background tasks still running.")
    # a delivery that fits is left as it is
    assert format_delivery(notices[1:2], 0, 4000) == notices[1].text + "\n\n" + running_line(0)


@pytest.mark.parametrize("wake_manager", ["all_done"], indirect=True)
async def test_an_all_done_batch_carries_at_most_the_notice_bound(
    wake_manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    parent = await _parent(backend)
    tasks = [
        await wake_manager.task(parent, f"[sleep] {i}" + "x" * 3000, "explore", f"t{i}")
        for i in range(3)
    ]
    for task in tasks:
        await wake_manager.output(task.id, block=True, timeout=5)
    await until(lambda: len(_bodies(backend, parent)) == 1, what="the one wake")
    wake = _text(_bodies(backend, parent)[0])
    for task in tasks:
        assert f"Background task `{task.id}` completed" in wake
        assert _cut_line(task.id, 3019) in wake
    # every result is 3,019 characters; they share 4,000: 1,333, 1,333 and 1,334, of which
    # the cut keeps 1,066 + 266 and 1,067 + 266
    assert wake.count("...[truncated 1687 chars]...") == 2
    assert wake.count("...[truncated 1686 chars]...") == 1
