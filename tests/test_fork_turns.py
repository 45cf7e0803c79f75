"""``fork_turns`` (the last N user turns and what followed them) and ``budget_reason``, in both
engines, from dicts and from JSON, with the exact preamble lines they add."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asyncagents import ForkConfig, build_fork_context
from asyncagents.compaction import CompactionSlice, keep_last_turns
from pydantic import ValidationError

ENGINES = ("rust", "python")


def message(i: int, role: str, text: str, **info: Any) -> dict[str, Any]:
    return {"info": {"id": f"msg_{i:04d}", "role": role, **info}, "parts": [
        {"type": "text", "text": text}
    ]}  # fmt: skip


def conversation(turns: int) -> list[dict[str, Any]]:
    out = []
    for k in range(turns):
        out.append(message(2 * k, "user", f"question {k}"))
        out.append(message(2 * k + 1, "assistant", f"answer {k}"))
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("as_json", [False, True])
def test_the_last_two_turns_and_what_followed(engine: str, as_json: bool) -> None:
    msgs = conversation(5)
    data: Any = json.dumps(msgs) if as_json else msgs
    ctx = build_fork_context(data, ForkConfig(fork_turns=2), engine=engine)  # type: ignore[arg-type]
    assert ctx.context == (
        "<inherited_context>\nUser:\nquestion 3\nAgent:\nanswer 3\n"
        "User:\nquestion 4\nAgent:\nanswer 4\n</inherited_context>"
    )
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- No compaction detected\n"
        "- Only the last 2 user turns kept (6 earlier messages removed)\n"
        "- Tool results: 0 full, 0 truncated to 3000 chars, 0 truncated to 500 chars\n"
        "- All messages preserved\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    assert ctx.stats.original_count == 10
    assert ctx.stats.final_count == 4
    assert ctx.stats.removed_messages == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_fewer_turns_than_asked_keeps_all_and_says_nothing(engine: str) -> None:
    msgs = conversation(2)
    plain = build_fork_context(msgs, engine=engine)  # type: ignore[arg-type]
    ctx = build_fork_context(msgs, ForkConfig(fork_turns=3), engine=engine)  # type: ignore[arg-type]
    assert ctx.text == plain.text


@pytest.mark.parametrize("engine", ENGINES)
def test_turns_count_after_the_compaction_boundary(engine: str) -> None:
    msgs = [
        *conversation(2),
        {
            "info": {"id": "msg_0100", "role": "user"},
            "parts": [{"type": "compaction", "auto": True}],
        },
        message(101, "assistant", "the summary", summary=True, parentID="msg_0100"),
        message(102, "user", "after one"),
        message(103, "assistant", "reply one"),
        message(104, "user", "after two"),
        message(105, "assistant", "reply two"),
    ]
    ctx = build_fork_context(msgs, ForkConfig(fork_turns=1), engine=engine)  # type: ignore[arg-type]
    assert ctx.context == (
        "<inherited_context>\nUser:\nafter two\nAgent:\nreply two\n</inherited_context>"
    )
    assert "- Only the last 1 user turns kept (3 earlier messages removed)\n" in ctx.preamble
    assert ctx.stats.compaction_detected and ctx.stats.compaction_slice_index == 5
    wide = build_fork_context(msgs, ForkConfig(fork_turns=5), engine=engine)  # type: ignore[arg-type]
    assert wide.context.startswith("<inherited_context>\nAgent:\nthe summary\n")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_small_budget_and_its_reason(engine: str) -> None:
    msgs = [message(i, "user" if i % 2 == 0 else "assistant", "x" * 400) for i in range(40)]
    config = ForkConfig(
        char_budget=2_000,
        char_no_removal=1_000,
        budget_reason="sized to the context window of local/small (16000 tokens)",
    )
    ctx = build_fork_context(msgs, config, engine=engine)  # type: ignore[arg-type]
    assert len(ctx.context) <= 2_000
    assert ctx.stats.final_count == 4
    assert ctx.preamble.splitlines()[4:] == [
        "- 36 oldest messages removed to fit 2000 char budget",
        "- Char budget 2000: sized to the context window of local/small (16000 tokens)",
        "If you need complete file contents or detailed results, re-read the files directly.",
    ]


def test_keep_last_turns_on_a_slice() -> None:
    sliced = CompactionSlice([4, 0, 1, 5, 6, 7], True, 4, 2)
    users = {0, 6}
    assert keep_last_turns(sliced, users.__contains__, None) is sliced
    assert keep_last_turns(sliced, users.__contains__, 1) == sliced._replace(
        kept=[6, 7], turn_removed=4
    )
    assert keep_last_turns(sliced, users.__contains__, 2) == sliced._replace(
        kept=[0, 1, 5, 6, 7], turn_removed=1
    )
    assert keep_last_turns(sliced, users.__contains__, 3) is sliced


@pytest.mark.parametrize("bad", [0, -1])
def test_fork_turns_is_at_least_one(bad: int) -> None:
    with pytest.raises(ValidationError, match="fork_turns"):
        ForkConfig(fork_turns=bad)


def test_a_lone_surrogate_in_the_budget_reason_is_refused() -> None:
    with pytest.raises(ValidationError, match="budget_reason"):
        ForkConfig(budget_reason="bad \ud800")
