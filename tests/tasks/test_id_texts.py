"""Task ids in agent texts are Markdown code (OpenCode renders replies as Markdown: two bare
ids on a line lose their underscores to italics). The texts of the typed errors, exact."""

from __future__ import annotations

from asyncagents.tasks import (
    AmbiguousTaskIdError,
    SessionExpiredError,
    TaskBeingResumedError,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskNotRunningError,
)
from asyncagents.tasks.markdown import code
from hypothesis import given
from hypothesis import strategies as st


def test_code_wraps_in_backticks_longer_than_any_run_inside() -> None:
    assert code("tsk_01a2_b") == "`tsk_01a2_b`"
    assert code("a`b") == "``a`b``"
    assert code("`x") == "`` `x ``"
    assert code("x``y`") == "``` x``y` ```"
    assert code("") == "``"


@given(st.text())
def test_code_keeps_any_text_whole(text: str) -> None:
    wrapped = code(text)
    fence = len(wrapped) - len(wrapped.lstrip("`"))
    inner = wrapped[fence:-fence]
    if text.startswith("`") or text.endswith("`"):
        inner = inner[1:-1]
    assert inner == text
    assert "`" * fence not in text


def test_error_texts_put_every_id_in_backticks() -> None:
    assert str(TaskNotFoundError("tsk_a_b")) == (
        "No background task with id `tsk_a_b`. Call asyncagents_list to see the ids of your "
        "tasks; cleared tasks are gone."
    )
    assert str(AmbiguousTaskIdError("tsk_", ["tsk_1", "tsk_2"])) == (
        "Task id `tsk_` is ambiguous; it matches several tasks: `tsk_1`, `tsk_2`. Give more "
        "characters of the id."
    )
    assert str(TaskNotCompletedError("tsk_1", "running")) == (
        "Only completed tasks can be resumed; task `tsk_1` is running. It is still running: "
        "wait for its completion notice or call asyncagents_output with task_id `tsk_1` and "
        "block=true, then resume it."
    )
    assert str(TaskNotCompletedError("tsk_1", "error")) == (
        "Only completed tasks can be resumed; task `tsk_1` is error. It ended as error; start a "
        "new asyncagents_task (fork=true if it needs your context) instead."
    )
    assert str(TaskBeingResumedError("tsk_1")) == (
        "Task `tsk_1` is currently being resumed and has not answered yet. Wait for the notice, "
        "or call asyncagents_output with task_id `tsk_1` and block=true, then resume it again."
    )
    assert str(SessionExpiredError("tsk_1", "ses_9")) == (
        "Cannot resume task `tsk_1`: its session `ses_9` no longer exists. Start a new "
        "asyncagents_task with the full instructions (fork=true to pass your context)."
    )
    assert str(SessionExpiredError("tsk_1", None)) == (
        "Cannot resume task `tsk_1`: its session no longer exists. Start a new asyncagents_task "
        "with the full instructions (fork=true to pass your context)."
    )
    assert str(TaskNotRunningError("tsk_1", "completed")) == (
        "Task `tsk_1` is completed, not running; there is nothing to cancel. Use "
        "asyncagents_output to read it or asyncagents_clear to remove your tasks."
    )
