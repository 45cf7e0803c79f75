"""`fit_task`: whatever a task holds, its JSON fits the budget, every text is a prefix of the
original (cut on code points), and exactly the changed fields are named in ``truncated``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asyncagents.service.event_size import (
    EVENT_TASK_BYTES,
    EVENT_TEXT_CHARS,
    MIN_TASK_BYTES,
    SNAPSHOT_TASK_BYTES,
    fit_task,
)
from asyncagents.service.event_stream import event_task_json, task_json
from asyncagents.tasks import TaskProgress
from dash_support import make_task
from hypothesis import given, settings
from hypothesis import strategies as st

_PIECES = st.sampled_from(["a", "é", "\u4e2d", "\U0001f600", "\x00", "\n", '"', "\\", "\ud800"])
_TEXTS = st.one_of(
    st.text(max_size=50),
    st.builds(lambda piece, n: piece * n, _PIECES, st.integers(0, 30_000)),
)
_FIELDS = ("prompt", "description", "agent", "result", "error", "last_prompt", "session_id",
           "parent_session_id", "backend", "owner", "turn_after_message_id")  # fmt: skip


def _get(out: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        out = out[part]
    return out


@settings(max_examples=150, deadline=None)
@given(
    texts=st.fixed_dictionaries({}, optional=dict.fromkeys(_FIELDS, _TEXTS)),
    last_tool=st.none() | _TEXTS,
    task_id=st.sampled_from(["tsk_1", "tsk_" + "\U0001f600" * 5000]),
    budget=st.sampled_from([MIN_TASK_BYTES, SNAPSHOT_TASK_BYTES, EVENT_TASK_BYTES]),
)
def test_fit_task_always_fits_and_names_what_it_cut(
    texts: dict[str, str], last_tool: str | None, task_id: str, budget: int
) -> None:
    task = make_task(1, id=task_id, progress=TaskProgress(last_tool=last_tool), **texts)
    whole = task_json(task)
    out = fit_task(task_json(task), budget)
    encoded = json.dumps(out, separators=(",", ":"))
    assert encoded.isascii() and len(encoded) <= budget
    paths = [*whole, "progress.last_tool"]
    changed = {
        p for p in paths if isinstance(_get(whole, p), str) and _get(out, p) != _get(whole, p)
    }
    assert set(out["truncated"]) == changed
    assert len(out["truncated"]) == len(changed)  # each named once
    for path in changed:
        original, kept = _get(whole, path), _get(out, path)
        assert original.startswith(kept) and len(kept) <= EVENT_TEXT_CHARS
    for name in ("status", "created_at", "turn", "resume_count", "is_forked"):
        assert out[name] == whole[name]


def test_a_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2048"):
        fit_task(task_json(make_task(1)), MIN_TASK_BYTES - 1)


def test_a_small_task_is_untouched() -> None:
    task = make_task(1)
    assert event_task_json(task) == {**task_json(task), "truncated": []}
