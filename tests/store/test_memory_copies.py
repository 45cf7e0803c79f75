"""`InMemoryTaskStore`'s copies (`fresh_copy`): equal to the original, and sharing with it
nothing that can change in place, whatever fields a model has (a new field is covered too)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from asyncagents.tasks.models import FollowUp, Notice, NoticeKind, Task, TaskLimits, TaskUsage
from asyncagents.tasks.store.memory import fresh_copy
from pydantic import BaseModel

_SHAREABLE = (str, int, float, bool, type(None), Enum)


def _changeable(value: Any, into: dict[int, Any]) -> dict[int, Any]:
    """Every object reachable from `value` that could change in place, by id."""
    if isinstance(value, _SHAREABLE):
        return into
    into[id(value)] = value
    if isinstance(value, BaseModel):
        for item in value.__dict__.values():
            _changeable(item, into)
    elif isinstance(value, dict):
        for item in value.values():
            _changeable(item, into)
    elif isinstance(value, list | tuple | set):
        for item in value:
            _changeable(item, into)
    return into


def _full_task() -> Task:
    task = Task(
        id="tsk_1",
        parent_session_id="ses_p",
        prompt="p",
        agent="build",
        description="d",
        fork_stats={"kept": 3, "nested": {"x": [1, {"y": 2}]}, "pair": (1, [2])},
        pending_followups=[FollowUp(prompt="next")],
        tries=["p/m", None],
        usage=TaskUsage(cost=0.5),
        usage_by_model={"p/m": TaskUsage(cost=0.5)},
        limits=TaskLimits(max_cost=1.0),
    )
    task.progress.tools = {"read": 2}
    task.progress.retry = {"attempt": 1, "detail": {"codes": [429]}}
    return task


def test_a_copy_equals_the_original_and_shares_nothing_changeable() -> None:
    original = _full_task()
    copied = fresh_copy(original)
    assert copied == original
    assert copied.model_fields_set == original.model_fields_set
    shared = _changeable(original, {}).keys() & _changeable(copied, {}).keys()
    assert shared == set()


class _WithNewFields(BaseModel):
    """A model with fields `Task` does not have (yet): a set, a nested list of models."""

    name: str
    kind: NoticeKind
    tags: set[str]
    groups: list[list[TaskUsage]]
    anything: Any = None


def test_fields_of_any_type_are_copied_unless_they_cannot_change() -> None:
    original = _WithNewFields(
        name="n",
        kind=NoticeKind.ERROR,
        tags={"a"},
        groups=[[TaskUsage(cost=1.0)]],
        anything={"deep": [1]},
    )
    copied = fresh_copy(original)
    assert copied == original
    assert _changeable(original, {}).keys() & _changeable(copied, {}).keys() == set()
    copied.tags.add("b")
    copied.groups[0][0].cost = 2.0
    copied.anything["deep"].append(2)
    assert original.tags == {"a"} and original.groups[0][0].cost == 1.0
    assert original.anything == {"deep": [1]}


def test_a_notice_copy_is_independent_too() -> None:
    notice = Notice(
        task_id="tsk_1",
        parent_session_id="ses_p",
        kind=NoticeKind.COMPLETED,
        turn=1,
        text="done",
        result_span=(0, 4),
    )
    copied = fresh_copy(notice)
    assert copied == notice and copied is not notice
