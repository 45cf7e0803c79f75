"""Reading a turn's state from a session's messages: the proof a child's run has ended.

OpenCode stores every step as its own assistant message; a turn is over when its last message is
an assistant message with ``time.completed`` and a final ``finish`` (not ``"tool-calls"``), or
with an ``error``. Nothing else (absence from ``/session/status``, a lone event) is proof.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from .models import TaskProgress

ABORTED = "MessageAbortedError"


class TurnState(BaseModel):
    """What the messages of one turn say."""

    started: bool = False
    done: bool = False
    error: str | None = None
    error_name: str | None = None
    #: the assistant message's ``error`` as OpenCode stored it (for the retry decision)
    error_object: dict[str, Any] | None = None
    text: str = ""
    progress: TaskProgress = TaskProgress()
    #: the ids of the turn's tool calls (`tool_call_id`)
    call_ids: set[str] = Field(default_factory=set)
    #: what the messages hold so far (messages, parts, characters, tool states): it changes
    #: whenever the child makes progress, so two reads that differ prove progress
    activity: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: the id of the turn's last message, once it is done (a follow-up's prompt goes after it)
    last_message_id: str | None = None

    @property
    def aborted(self) -> bool:
        """The turn ended by an abort (ours or someone else's)."""
        return self.error_name == ABORTED


def format_error(error: Any) -> tuple[str, str]:
    """``(name, "Name: message")`` of an OpenCode error object (``{name, data:{message}}``)."""
    if not isinstance(error, dict):
        return "Error", str(error)
    name = str(error.get("name") or "Error")
    data = error.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    return name, f"{name}: {message}" if message else name


def tool_call_id(part: dict[str, Any]) -> str:
    """The id of the call a tool part records (its ``callID``, else the part's ``id``)."""
    return str(part.get("callID") or part.get("id") or "")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_turn(messages: Sequence[Any], after_message_id: str | None) -> TurnState:
    """The state of the turn made of every message after `after_message_id` (all when None)."""
    turn = [
        m
        for m in messages
        if isinstance(m, dict)
        and (after_message_id is None or str(_dict(m.get("info")).get("id", "")) > after_message_id)
    ]
    state = TurnState()
    texts: list[str] = []
    progress = TaskProgress()
    parts_seen = chars = tool_marks = 0
    for message in turn:
        info = _dict(message.get("info"))
        for part in message.get("parts") or ():
            if isinstance(part, dict):
                parts_seen += 1
                chars += len(str(part.get("text") or ""))
                pstate = _dict(part.get("state"))
                tool_marks += len(str(pstate.get("status") or "")) + len(
                    str(pstate.get("output") or _dict(pstate.get("metadata")).get("output") or "")
                )
        times = _dict(info.get("time"))
        for key in ("created", "completed"):
            if isinstance(times.get(key), int):
                progress.last_activity_at = max(progress.last_activity_at or 0, times[key])
        if info.get("role") == "user":
            state.started = True
            continue
        if info.get("role") != "assistant" or info.get("summary") is True:
            continue
        progress.steps += 1
        if isinstance(info.get("providerID"), str) and isinstance(info.get("modelID"), str):
            progress.model = f"{info['providerID']}/{info['modelID']}"
        for part in message.get("parts") or ():
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "tool":
                progress.tool_calls += 1
                state.call_ids.add(tool_call_id(part))
                progress.last_tool = str(part.get("tool") or "unknown")
                progress.tools[progress.last_tool] = progress.tools.get(progress.last_tool, 0) + 1
                ptime = _dict(_dict(part.get("state")).get("time"))
                for key in ("start", "end"):
                    if isinstance(ptime.get(key), int):
                        progress.last_activity_at = max(progress.last_activity_at or 0, ptime[key])
            elif kind == "text" and part.get("text") and not part.get("ignored"):
                texts.append(str(part["text"]))
    state.progress = progress
    state.activity = (len(turn), parts_seen, chars, tool_marks)
    state.text = "\n\n".join(t.strip() for t in texts if t.strip())
    if not turn or not state.started:
        return state
    last = _dict(turn[-1].get("info"))
    if last.get("role") != "assistant":
        return state
    state.last_message_id = str(last.get("id") or "") or None
    if last.get("error"):
        state.error_name, state.error = format_error(last["error"])
        state.error_object = last["error"] if isinstance(last["error"], dict) else None
        state.done = True
        return state
    finish = last.get("finish")
    completed = _dict(last.get("time")).get("completed")
    if completed and finish and finish != "tool-calls" and last.get("summary") is not True:
        state.done = True
    return state
