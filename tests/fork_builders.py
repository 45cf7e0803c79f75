"""Builders for OpenCode-shaped messages (opencode 1.18 `GET /session/{id}/message`) and the
expected-string helpers of the fork pipeline tests. (A module of its own, not conftest.py, so that
``from fork_builders import ...`` never picks up another directory's conftest.)

Shapes follow shared/fixtures/opencode/FORMAT.md: every part has ``id``, ``sessionID``,
``messageID`` and ``type``; a tool call and its result are one ``tool`` part whose ``state``
depends on its ``status``.
"""

from __future__ import annotations

import itertools
from typing import Any

SESSION_ID = "ses_test0000000000000000000"
T0 = 1_767_000_000_000
OPEN = "<inherited_context>"
CLOSE = "\n</inherited_context>"
#: ``len(OPEN) + len(CLOSE)``
FRAME = 40
CLEARED = "[Old tool result content cleared]"

_MISSING: Any = object()
_part_ids = itertools.count()


# --- parts ---------------------------------------------------------------------------------------


def text(value: str, **extra: Any) -> dict[str, Any]:
    """A ``text`` part; pass ``ignored=True`` / ``synthetic=True`` as OpenCode does."""
    return {"type": "text", "text": value, **extra}


def reasoning(value: str) -> dict[str, Any]:
    return {"type": "reasoning", "text": value, "time": {"start": T0, "end": T0 + 5}}


def step_start() -> dict[str, Any]:
    return {"type": "step-start", "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"}


def step_finish(reason: str = "stop") -> dict[str, Any]:
    return {
        "type": "step-finish",
        "reason": reason,
        "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "cost": 0,
        "tokens": {"input": 120, "output": 30, "reasoning": 0, "cache": {"read": 0, "write": 0}},
    }


def patch(*files: str) -> dict[str, Any]:
    return {"type": "patch", "hash": "0f3a9d1", "files": list(files)}


def tool(
    name: str | None,
    input: Any = _MISSING,
    *,
    status: str = "completed",
    output: Any = _MISSING,
    error: Any = _MISSING,
    compacted: Any = _MISSING,
    name_field: str | None = None,
    state: Any = _MISSING,
) -> dict[str, Any]:
    """A ``tool`` part. ``input`` becomes ``state.input`` (omitted when not given).

    ``status="completed"`` stores ``output`` (omitted when not given) and ``state.time``;
    ``compacted`` sets ``state.time.compacted`` (what OpenCode's prune adds).
    ``status="error"`` stores ``error``. ``pending``/``running`` store no result.
    ``state=None`` builds a legacy tool part without a state object.
    """
    part: dict[str, Any] = {"type": "tool", "callID": f"call_{next(_part_ids)}"}
    if name is not None:
        part["tool"] = name
    if name_field is not None:
        part["name"] = name_field
    if state is not _MISSING:
        if state is not None:
            part["state"] = state
        return part
    st: dict[str, Any] = {"status": status}
    if input is not _MISSING:
        st["input"] = input
    if status == "completed":
        if output is not _MISSING:
            st["output"] = output
        st["title"] = name or ""
        st["metadata"] = {"truncated": False}
        st["time"] = {"start": T0, "end": T0 + 40}
        if compacted is not _MISSING:
            st["time"]["compacted"] = compacted
    elif status == "error":
        if error is not _MISSING:
            st["error"] = error
        st["time"] = {"start": T0, "end": T0 + 40}
    elif status == "running":
        st["time"] = {"start": T0}
    elif status == "pending":
        st["raw"] = ""
    part["state"] = st
    return part


def tool_result(value: Any = _MISSING, *, tool: str | None = None, name: str | None = None):
    """A legacy ``tool_result`` part (not produced by real OpenCode, still accepted)."""
    part: dict[str, Any] = {"type": "tool_result"}
    if value is not _MISSING:
        part["text"] = value
    if tool is not None:
        part["tool"] = tool
    if name is not None:
        part["name"] = name
    return part


def compaction(tail_start_id: str | None = None, *, auto: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "compaction", "auto": auto}
    if tail_start_id is not None:
        part["tail_start_id"] = tail_start_id
    return part


# --- messages ------------------------------------------------------------------------------------


def _stamp(mid: str | None, parts: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    out = []
    for part in parts:
        stamped = {"id": f"prt_{next(_part_ids):08d}", "sessionID": SESSION_ID}
        if mid is not None:
            stamped["messageID"] = mid
        stamped.update(part)
        out.append(stamped)
    return out


def user(mid: str, *parts: dict[str, Any], **info: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": mid,
        "sessionID": SESSION_ID,
        "role": "user",
        "time": {"created": T0},
        "agent": "build",
        "model": {"providerID": "fake", "modelID": "fake-model"},
    }
    base.update(info)
    return {"info": base, "parts": _stamp(mid, parts)}


def assistant(
    mid: str,
    *parts: dict[str, Any],
    parent: str | None = "msg_u",
    summary: Any = _MISSING,
    error: Any = _MISSING,
    **info: Any,
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": mid,
        "sessionID": SESSION_ID,
        "role": "assistant",
        "time": {"created": T0, "completed": T0 + 100},
        "modelID": "fake-model",
        "providerID": "fake",
        "mode": "build",
        "agent": "build",
        "path": {"cwd": "/tmp/proj", "root": "/tmp/proj"},
        "cost": 0,
        "tokens": {"input": 100, "output": 20, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        "finish": "stop",
    }
    if parent is not None:
        base["parentID"] = parent
    if summary is not _MISSING:
        base["summary"] = summary
        if summary is True:
            base["mode"] = base["agent"] = "compaction"
    if error is not _MISSING:
        base["error"] = error
    base.update(info)
    return {"info": base, "parts": _stamp(mid, parts)}


def message(role: Any, mid: str | None, *parts: dict[str, Any]) -> dict[str, Any]:
    """A message with any role; ``role=_MISSING`` leaves ``info.role`` out."""
    info: dict[str, Any] = {"sessionID": SESSION_ID}
    if mid is not None:
        info["id"] = mid
    if role is not _MISSING:
        info["role"] = role
    return {"info": info, "parts": _stamp(mid, parts)}


MISSING = _MISSING


# --- expected strings ----------------------------------------------------------------------------


def block(label: str, *lines: str) -> str:
    """One message in the transcript: ``"\\n" + label + ":"`` then ``"\\n" + line`` per line."""
    return "\n" + label + ":" + "".join("\n" + line for line in lines)


def framed(*blocks: str) -> str:
    return OPEN + "".join(blocks) + CLOSE


def head_only(value: str, limit: int) -> str:
    return f"{value[:limit]}\n...[truncated {len(value) - limit} chars]..."


def head_tail(value: str, limit: int) -> str:
    h = limit * 4 // 5
    t = limit // 5
    return f"{value[:h]}\n...[truncated {len(value) - h - t} chars]...\n{value[len(value) - t :]}"
