"""The child's conversation as ``asyncagents_output`` shows it, on OpenCode's real shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asyncagents.tasks import TaskManager, TaskRequestError, run_tool
from asyncagents.tasks.conversation import (
    MAX_TOOL_TEXT,
    format_conversation,
    format_message,
    select_messages,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _load(name: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())
    return data


def test_recorded_child_session() -> None:
    assert format_conversation(_load("child_messages.json")) == (
        "Conversation (3 of 3 messages):\n\n"
        "[msg_203803d9d001OIPCF6myEYjLrx] user\n"
        "[scenario:small] Say hello from the child session.\n\n"
        "[msg_203803dc2001UOIjF5xrluJVpE] assistant (build)\n"
        '[tool bash completed] {"command": "echo hello from fixture && date -u +%Y"}\n'
        "output: hello from fixture\n2026\n\n"
        "[msg_203803fe3001e0g8XIIGa3IWRi] assistant (build)\n"
        "Done with scenario `small`: ran 1 step(s) of tool calls. Everything requested has been "
        "executed; see the tool outputs above for details."
    )


def test_recorded_running_tool_and_abort() -> None:
    text = format_conversation(_load("abort_messages_while_tool_running.json"))
    assert text.endswith(
        "[msg_203804ba7001XN3zNHri991T1T] assistant (build)\n"
        '[tool bash running] {"command": "sleep 45 && echo finished"}'
    )
    after = format_conversation(_load("abort_messages_after_abort.json"))
    assert "[error] MessageAbortedError: Aborted" in after


def _msg(mid: str, role: str, *parts: dict[str, Any], **info: Any) -> dict[str, Any]:
    return {"info": {"id": mid, "role": role, "agent": "build", **info}, "parts": list(parts)}


def test_every_part_shape() -> None:
    long = "x" * (MAX_TOOL_TEXT + 5)
    message = _msg(
        "msg_2",
        "assistant",
        {"type": "step-start"},
        {"type": "reasoning", "text": "thinking it over"},
        {"type": "text", "text": "hidden", "ignored": True},
        {"type": "text", "text": "visible"},
        {
            "type": "tool",
            "tool": "read",
            "state": {"status": "error", "input": {"filePath": "/x"}, "error": "File not found"},
        },
        {
            "type": "tool",
            "tool": "bash",
            "state": {
                "status": "completed",
                "input": {"command": "ls"},
                "output": "old",
                "time": {"start": 1, "end": 2, "compacted": 3},
            },
        },
        {
            "type": "tool",
            "tool": "bash",
            "state": {"status": "completed", "input": {}, "output": long},
        },
        {"type": "patch", "hash": "h", "files": ["/a.py", "/b.py"]},
        {"type": "compaction", "auto": True},
        {"type": "step-finish", "reason": "stop"},
        error={"name": "APIError", "data": {"message": "rate limited"}},
    )
    assert format_message(message) == "\n".join(
        [
            "[msg_2] assistant (build)",
            "[reasoning] thinking it over",
            "visible",
            '[tool read error] {"filePath": "/x"}',
            "error: File not found",
            '[tool bash completed] {"command": "ls"}',
            "output: [old tool output cleared by OpenCode]",
            "[tool bash completed] {}",
            f"output: {'x' * MAX_TOOL_TEXT}\n[... 5 more characters]",
            "[files changed] /a.py, /b.py",
            "[conversation compacted]",
            "[error] APIError: rate limited",
        ]
    )


def test_selection_since_and_limit() -> None:
    messages = [_msg(f"msg_{i}", "user", {"type": "text", "text": str(i)}) for i in range(5)]
    assert [m["info"]["id"] for m in select_messages(messages, since_message_id="msg_2")] == [
        "msg_3",
        "msg_4",
    ]
    assert [m["info"]["id"] for m in select_messages(messages, message_limit=2)] == [
        "msg_3",
        "msg_4",
    ]
    picked = select_messages(messages, since_message_id="msg_0", message_limit=1)
    assert [m["info"]["id"] for m in picked] == ["msg_4"]
    assert select_messages(messages, since_message_id="msg_4") == []
    with pytest.raises(TaskRequestError, match="since_message_id 'msg_9' is not a message"):
        select_messages(messages, since_message_id="msg_9")
    assert format_conversation([], total=5) == "Conversation (0 of 5 messages): no messages."


def test_the_newest_messages_are_kept_when_over_the_cap() -> None:
    messages = [_msg(f"msg_{i}", "user", {"type": "text", "text": "y" * 50}) for i in range(10)]
    text = format_conversation(messages, max_chars=200)
    assert text.startswith("Conversation (3 of 10 messages; 7 older ones left out to fit):\n\n")
    assert text.endswith("[msg_9] user\n" + "y" * 50)


async def test_output_with_the_conversation(manager: TaskManager, parent: str) -> None:
    task = await manager.task(parent, "[tool] go", agent="build", description="with tool")
    await manager.output(task.id, block=True, timeout=10)
    text = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "full_session": "true"}
    )
    head, conversation = text.split("\n\nConversation ", 1)
    assert head == (
        f"Task `{task.id}` [completed] build: with tool\n\nResult:\nReply to: [tool] go\n"
        "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."
    )
    assert conversation.startswith("(3 of 3 messages):\n\n[msg_")
    assert '[tool bash completed] {"command": "echo hi"}\noutput: hi' in conversation
    assert conversation.endswith("Reply to: [tool] go")
    last = await run_tool(
        manager, parent, "asyncagents_output", {"task_id": task.id, "message_limit": 1}
    )
    assert last.split("\n\nConversation ", 1)[1].startswith("(1 of 3 messages):\n\n[msg_")
    bad = await run_tool(
        manager,
        parent,
        "asyncagents_output",
        {"task_id": task.id, "since_message_id": "msg_nope"},
    )
    assert bad == (
        "Error: since_message_id 'msg_nope' is not a message of this task's session; use an id "
        "from a [msg_...] header of an earlier output."
    )
