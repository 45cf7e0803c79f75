"""Every text an agent sees from the five tools, exact."""

from __future__ import annotations

import re

import pytest
from asyncagents.tasks import (
    OutputResult,
    Task,
    TaskManager,
    TaskProgress,
    run_tool,
)
from asyncagents.tasks import tools as tools_module
from tasks_script import Script

AGENT = "build"
_COUNTS = "0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00"
#: the last line of asyncagents_output for a task that used no tokens
NO_USAGE = f"Usage: {_COUNTS}."
NO_USAGE_RESUMED = f"Usage: this turn {_COUNTS}; all turns {_COUNTS}."


def _wait(task_id: str) -> str:
    return f'To wait for it now, call `asyncagents_output(task_id="{task_id}", block=true)`.'


async def _launch(manager: TaskManager, parent: str, prompt: str, **extra: object) -> Task:
    text = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": prompt, "agent": AGENT, "description": "a job", **extra},
    )
    found = re.search(r"`(tsk_[0-9a-f]+)`", text)
    assert found, text
    task = next(t for t in await manager.list(parent) if t.id == found.group(1))
    label = f"`{task.id}`" + (" (forked)" if task.is_forked else "")
    assert text == (
        f"Background task started: {label}\nAgent: build\nDescription: a job\nStatus: running\n"
        "You will get a notice in this session when it completes or fails; continue with other "
        f'work meanwhile. To wait for it now, call `asyncagents_output(task_id="{task.id}", '
        "block=true)`."
    )
    return task


async def test_launch_text(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "do it")
    assert not task.is_forked


async def test_fork_launch_text(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "do it", fork=True)
    assert task.is_forked


async def test_resume_accepted_text(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "first")
    await manager.output(task.id, block=True, timeout=10)
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "[hold] more", "resume": task.id}
    )
    assert text == (
        f"Follow-up sent to background task `{task.id}` (resumed) (build): a job\n"
        "Status: resumed. You will get a notice with its full response when it answers. "
        + _wait(task.id)
    )


async def test_output_completed_text(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "do it")
    text = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "block": True}
    )
    assert text == (
        f"Task `{task.id}` [completed] build: a job\n\nResult:\nReply to: do it\n{NO_USAGE}"
    )


async def test_output_error_text(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "[fail] do it")
    text = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "block": True}
    )
    assert text == (
        f"Task `{task.id}` [error] build: a job\n\n"
        "Error: APIError: Invalid request: rejected by the provider\n"
        f"Start a new asyncagents_task to try again.\n{NO_USAGE}"
    )


async def test_cancel_and_output_cancelled_texts(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "[hold] do it")
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": task.id})
    assert text == f"Cancelled background task `{task.id}`: a job"
    text = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
    assert text == (
        f"Task `{task.id}` [cancelled] build: a job\n\nThe task was cancelled: cancelled by the "
        f"parent\n{NO_USAGE}"
    )
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": task.id})
    assert text == (
        f"Error: Task `{task.id}` is cancelled, not running; there is nothing to cancel. Use "
        "asyncagents_output to read it or asyncagents_clear to remove your tasks."
    )


def _running(progress: TaskProgress) -> Task:
    return Task(
        id="tsk_1",
        parent_session_id="ses_p",
        session_id="ses_c",
        prompt="p",
        agent=AGENT,
        description="a job",
        created_at=1_000_000,
        turn_started_at=1_000_000,
        progress=progress,
    )


def test_output_running_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools_module, "now_ms", lambda: 1_042_000)
    idle = OutputResult(task=_running(TaskProgress()))
    assert tools_module.format_output(idle) == (
        "Task `tsk_1` [running] build: a job\n"
        "Running for 42s; 0 tool call(s) so far; last activity unknown.\n"
        "It is still working: continue with other work (you will get a notice), or call "
        f"asyncagents_output again with block=true to wait.\n{NO_USAGE}"
    )
    busy = TaskProgress(tool_calls=3, last_tool="bash", last_activity_at=1_040_000, steps=2)
    waited = OutputResult(task=_running(busy), timed_out=True, waited_seconds=5.2)
    assert tools_module.format_output(waited) == (
        "Still running after waiting 5s.\n"
        "Task `tsk_1` [running] build: a job\n"
        "Running for 42s; 3 tool call(s) so far (last: bash); last activity 2s ago.\n"
        "It is still working: continue with other work (you will get a notice), or call "
        f"asyncagents_output again with block=true to wait.\n{NO_USAGE}"
    )


async def test_output_running_through_the_tool(
    manager: TaskManager, parent: str, script: Script
) -> None:
    task = await _launch(manager, parent, "[hold] do it")
    text = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
    lines = text.splitlines()
    assert lines[0] == f"Task `{task.id}` [running] build: a job"
    assert re.fullmatch(
        r"Running for \d+s; 0 tool call\(s\) so far; last activity (unknown|\d+s ago)\.", lines[1]
    ), lines[1]
    script.release.set()


async def test_list_texts_with_marks(manager: TaskManager, parent: str) -> None:
    assert await run_tool(manager, parent, "asyncagents_list", {}) == "No background tasks found"
    plain = await _launch(manager, parent, "plain")
    await manager.output(plain.id, block=True, timeout=10)
    await manager.task(parent, "again", resume=plain.id, agent="", description="")
    await manager.output(plain.id, block=True, timeout=10)
    forked = await _launch(manager, parent, "[hold] forked", fork=True)
    text = await run_tool(manager, parent, "asyncagents_list", {})
    assert text == (
        "Background tasks (newest first):\n"
        f"- `{forked.id}` (forked) [running] build: a job (0 tokens, $0.00)\n"
        f"- `{plain.id}` (resumed) [completed] build: a job (0 tokens, $0.00)"
    )
    text = await run_tool(manager, parent, "asyncagents_list", {"status": "COMPLETED"})
    assert text == (
        "Background tasks (newest first):\n"
        f"- `{plain.id}` (resumed) [completed] build: a job (0 tokens, $0.00)"
    )
    text = await run_tool(manager, parent, "asyncagents_list", {"status": "error"})
    assert text == "No background tasks found"


async def test_clear_texts(manager: TaskManager, parent: str) -> None:
    assert await run_tool(manager, parent, "asyncagents_clear", {}) == "No background tasks found"
    done = await _launch(manager, parent, "done")
    await manager.output(done.id, block=True, timeout=10)
    await _launch(manager, parent, "[hold] running")
    text = await run_tool(manager, parent, "asyncagents_clear", {})
    assert text == "Cleared 2 background task(s); 1 running one(s) aborted."
    assert await run_tool(manager, parent, "asyncagents_list", {}) == "No background tasks found"


async def test_unknown_tool_text(manager: TaskManager, parent: str) -> None:
    assert await run_tool(manager, parent, "task", {}) == (
        "Error: unknown tool 'task'; the task tools are asyncagents_task, asyncagents_output, "
        "asyncagents_list, asyncagents_cancel, asyncagents_clear."
    )


async def test_unknown_task_text(manager: TaskManager, parent: str) -> None:
    text = await run_tool(manager, parent, "asyncagents_output", {"task_id": "tsk_nope"})
    assert text == (
        "Error: No background task with id `tsk_nope`. Call asyncagents_list to see the ids of "
        "your tasks; cleared tasks are gone."
    )


async def test_bad_arguments_text_names_every_field(manager: TaskManager, parent: str) -> None:
    text = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"fork": "maybe", "agent": 3, "colour": "red", "description": None},
    )
    assert text == (
        "Error: invalid arguments for asyncagents_task:\n"
        "- prompt: required\n"
        "- agent: must be a string (got 3)\n"
        '- fork: must be true or false (got "maybe")\n'
        "- colour: not an argument of asyncagents_task (its arguments: prompt, agent, "
        "description, fork, resume, max_runtime, max_tool_calls, max_cost, max_tokens, when, "
        "model, fork_turns)"
    )
    text = await run_tool(
        manager,
        parent,
        "asyncagents_output",
        {"task_id": "t", "timeout": 601, "message_limit": 2.5, "since_message_id": []},
    )
    assert text == (
        "Error: invalid arguments for asyncagents_output:\n"
        "- timeout: must be between 0 and 600 seconds (got 601)\n"
        "- since_message_id: must be a string (got [])\n"
        "- message_limit: must be a whole number (got 2.5)"
    )
    text = await run_tool(manager, parent, "asyncagents_list", {"status": "done"})
    assert text == (
        "Error: invalid arguments for asyncagents_list:\n"
        "- status: must be one of queued, running, resumed, completed, error, cancelled "
        '(got "done")'
    )
    text = await run_tool(manager, parent, "asyncagents_clear", {"all": True})
    assert text == (
        "Error: invalid arguments for asyncagents_clear:\n"
        "- all: not an argument of asyncagents_clear (its arguments: none)"
    )


async def test_fork_and_resume_together_text(manager: TaskManager, parent: str) -> None:
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "p", "fork": True, "resume": "tsk_x"}
    )
    assert text == (
        "Error: fork and resume are mutually exclusive: resume continues the task's own session "
        "(which already has its history), fork starts a new task with a copy of your context. "
        "Call asyncagents_task again with only one of them."
    )


async def test_a_unique_prefix_of_a_task_id_works(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "do it")
    await manager.output(task.id, block=True, timeout=10)
    text = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id[:12]})
    assert text == (
        f"Task `{task.id}` [completed] build: a job\n\nResult:\nReply to: do it\n{NO_USAGE}"
    )


async def test_an_ambiguous_prefix_text(manager: TaskManager, parent: str) -> None:
    first = await _launch(manager, parent, "one")
    second = await _launch(manager, parent, "two")
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": "tsk_"})
    first_id, second_id = sorted((first.id, second.id))
    assert text == (
        "Error: Task id `tsk_` is ambiguous; it matches several tasks: "
        f"`{first_id}`, `{second_id}`. Give more characters of the id."
    )


async def test_failed_and_cancelled_follow_up_texts(manager: TaskManager, parent: str) -> None:
    task = await _launch(manager, parent, "first")
    await manager.output(task.id, block=True, timeout=10)
    await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "[fail] more", "resume": task.id}
    )
    text = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "block": True}
    )
    assert text == (
        f"Task `{task.id}` (resumed) [completed] build: a job\n\nResult:\nReply to: first\n\n"
        "The last follow-up did not answer: APIError: Invalid request: rejected by the provider\n"
        f"The result above is from before it; the task can be resumed again.\n{NO_USAGE_RESUMED}"
    )
    await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "[hold] again", "resume": task.id}
    )
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": task.id})
    assert text == (
        f"Cancelled the follow-up of background task `{task.id}` (resumed): a job\n"
        "It is completed again with its previous result."
    )
    text = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
    assert text.endswith(
        "Result:\nReply to: first\n\nThe last follow-up did not answer: the follow-up was "
        "cancelled by the parent\nThe result above is from before it; the task can be resumed "
        f"again.\n{NO_USAGE_RESUMED}"
    )
