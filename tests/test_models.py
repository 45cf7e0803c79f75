"""The pydantic models of OpenCode's message JSON, on the real recordings and on odd input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asyncagents import build_fork_context
from asyncagents.models import (
    AssistantInfo,
    CompactionPart,
    Message,
    OtherInfo,
    OtherPart,
    ToolPart,
    ToolStateCompleted,
    ToolStateError,
    ToolStateOther,
    ToolStateRunning,
    UserInfo,
    parse_messages,
)
from pydantic import ValidationError

FIXTURES = Path(__file__).parent / "fixtures"
RECORDINGS = sorted(p for p in FIXTURES.glob("*messages*.json"))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_every_recording_validates_from_bytes_and_dicts(path: Path) -> None:
    raw = path.read_bytes()
    from_bytes = parse_messages(raw)
    from_dicts = parse_messages(json.loads(raw))
    assert from_bytes == from_dicts
    assert len(from_bytes) == len(json.loads(raw))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
@pytest.mark.parametrize("engine", ["rust", "python"])
def test_models_fork_like_the_raw_json(path: Path, engine: str) -> None:
    raw = path.read_bytes()
    models = parse_messages(raw)
    assert build_fork_context(models, engine=engine) == build_fork_context(raw, engine=engine)


def test_the_compacted_session_has_the_shapes_format_md_describes() -> None:
    messages = parse_messages((FIXTURES / "messages_main_after_compaction.json").read_bytes())
    markers = [p for m in messages for p in m.parts if isinstance(p, CompactionPart)]
    assert len(markers) == 1 and markers[0].tail_start_id is not None
    summaries = [
        m for m in messages if isinstance(m.info, AssistantInfo) and m.info.summary is True
    ]
    assert len(summaries) == 1 and summaries[0].info.mode == "compaction"
    users = [m.info for m in messages if isinstance(m.info, UserInfo)]
    assert all(u.summary is None or isinstance(u.summary, dict) for u in users)
    tools = [p for m in messages for p in m.parts if isinstance(p, ToolPart)]
    assert tools and all(t.call_id for t in tools)
    pruned = [
        t
        for t in tools
        if isinstance(t.state, ToolStateCompleted) and t.state.time and t.state.time.compacted
    ]
    assert len(pruned) == 13


def test_running_and_error_tool_states() -> None:
    running = parse_messages((FIXTURES / "abort_messages_while_tool_running.json").read_bytes())
    states = [p.state for m in running for p in m.parts if isinstance(p, ToolPart)]
    assert any(isinstance(s, ToolStateRunning) for s in states)
    error = Message.model_validate(
        {
            "info": {"id": "msg_1", "role": "assistant"},
            "parts": [{"type": "tool", "tool": "read", "state": {"status": "error", "error": "x"}}],
        }
    )
    part = error.parts[0]
    assert isinstance(part, ToolPart) and isinstance(part.state, ToolStateError)
    assert part.state.error == "x"


def test_unknown_types_roles_states_and_fields_are_kept() -> None:
    message = Message.model_validate(
        {
            "info": {"id": "msg_1", "role": "system", "brand_new": 1},
            "parts": [
                {"type": "hologram", "beam": [1, 2]},
                {"type": "tool", "tool": "x", "state": {"status": "queued", "eta": 3}},
            ],
            "extra": True,
        }
    )
    assert isinstance(message.info, OtherInfo) and message.info.role == "system"
    assert isinstance(message.parts[0], OtherPart) and message.parts[0].type == "hologram"
    tool = message.parts[1]
    assert isinstance(tool, ToolPart) and isinstance(tool.state, ToolStateOther)
    dumped = message.model_dump(by_alias=True, exclude_unset=True)
    assert dumped["extra"] is True and dumped["parts"][0]["beam"] == [1, 2]


def test_a_message_without_info_is_rejected() -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"parts": []})


def test_unset_input_stays_unset_through_models() -> None:
    """`state.input` present (even `{}`) renders; absent does not: models keep the difference."""

    def msgs(state: dict[str, object]) -> list[Message]:
        return parse_messages(
            [
                {
                    "info": {"id": "m", "role": "assistant"},
                    "parts": [{"type": "tool", "tool": "t", "state": state}],
                }
            ]
        )

    absent = build_fork_context(msgs({"status": "completed", "output": "ok"}))
    empty = build_fork_context(msgs({"status": "completed", "output": "ok", "input": {}}))
    assert "[Tool: t]\n[Tool result]\nok" in absent.context
    assert "[Tool: t] {}\n[Tool result]\nok" in empty.context
