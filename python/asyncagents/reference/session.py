"""Reference input handling: JSON text or Python objects in, checked plain records out.

Every check of docs/pipeline-contract.md lives here, in the order the contract fixes, so that
the Rust engine can be held to the same path and detail for every malformed input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..compaction import MessageMeta
from ..errors import ForkInputError

#: Containers nested deeper than this in a JSON document are rejected.
MAX_DOCUMENT_DEPTH = 128
#: Containers nested deeper than this in one `state.input` are rejected.
MAX_INPUT_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_TOP_LEVEL = 'expected an array of messages or an export object with a "messages" array'


@dataclass(slots=True)
class ToolCall:
    """A `tool` part: its display name, parameters JSON, and result (None: no result)."""

    name: str
    has_state: bool
    input_json: str | None
    status: str | None
    result: str | None
    compacted: bool


@dataclass(slots=True)
class ToolResult:
    """A legacy `tool_result` part with non-empty text."""

    name: str
    text: str


@dataclass(slots=True)
class Message:
    """One message reduced to what the pipeline reads."""

    meta: MessageMeta
    #: the rendered error line of an assistant message, or None
    error_line: str | None
    #: text strings, ToolCall and ToolResult objects, in part order
    parts: list[str | ToolCall | ToolResult] = field(default_factory=list)


# --- documents ------------------------------------------------------------------------------


def load_json(data: bytes | str) -> Any:
    """Parse a JSON document as the Rust parser does: strict UTF-8, no NaN, bounded nesting."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ForkInputError("json", "invalid UTF-8") from None
    else:
        text = data
        if _SURROGATE.search(text):
            raise ForkInputError("json", "contains a lone surrogate")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ForkInputError("json", f"invalid JSON: {exc}") from None
    except RecursionError:  # far deeper than the limit, which json.loads does not know
        document = None
        depth = MAX_DOCUMENT_DEPTH + 1
    else:
        depth = _depth(document)
    if depth > MAX_DOCUMENT_DEPTH:
        raise ForkInputError("json", f"nested deeper than {MAX_DOCUMENT_DEPTH} levels")
    # json.loads joins escaped surrogate pairs; any surrogate left came from a lone escape.
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(document):
        raise ForkInputError("json", "invalid JSON: lone surrogate in a string escape")
    return document


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    """Deepest container nesting of a parsed document (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def message_list(document: Any) -> Sequence[Any]:
    """The messages of a `GET /session/{id}/message` list or an `opencode export` document."""
    if isinstance(document, list | tuple):
        return document
    if isinstance(document, dict) and isinstance(document.get("messages"), list | tuple):
        messages: Sequence[Any] = document["messages"]
        return messages
    raise ForkInputError("messages", _TOP_LEVEL)


# --- field checks ---------------------------------------------------------------------------


def _string(obj: dict[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ForkInputError(f"{path}.{key}", "expected a string")
    if _SURROGATE.search(value):
        raise ForkInputError(f"{path}.{key}", "contains a lone surrogate")
    return value


def _object(obj: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ForkInputError(f"{path}.{key}", "expected an object")
    return value


def _boolean(obj: dict[str, Any], key: str, path: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ForkInputError(f"{path}.{key}", "expected a boolean")
    return value


def _number(obj: dict[str, Any], key: str, path: str) -> float | int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ForkInputError(f"{path}.{key}", "expected a number")
    number: float | int = value
    return number


def check_json_value(value: Any, path: str, level: int = 0) -> None:
    """`state.input` must be plain JSON (str keys) nested at most MAX_INPUT_DEPTH levels."""
    if isinstance(value, dict | list | tuple):
        if level + 1 > MAX_INPUT_DEPTH:
            raise ForkInputError(path, f"nested deeper than {MAX_INPUT_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ForkInputError(path, "keys must be strings")
                if _SURROGATE.search(key):
                    raise ForkInputError(path, "contains a lone surrogate")
                check_json_value(item, path, level + 1)
        else:
            for item in value:
                check_json_value(item, path, level + 1)
    elif isinstance(value, str):
        if _SURROGATE.search(value):
            raise ForkInputError(path, "contains a lone surrogate")
    elif value is not None and not isinstance(value, bool | int | float):
        raise ForkInputError(path, f"not a JSON value ({type(value).__name__})")


def dump_input(value: Any) -> str:
    """Parameters JSON exactly as DECISIONS.md fixes it (Python's compact json.dumps)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- messages -------------------------------------------------------------------------------


def read_messages(messages: Sequence[Any]) -> list[Message]:
    """Check every message and reduce it to a `Message` record."""
    return [_read_message(raw, f"messages[{i}]") for i, raw in enumerate(messages)]


def _read_message(raw: Any, path: str) -> Message:
    if not isinstance(raw, dict):
        raise ForkInputError(path, "expected an object")
    info = raw.get("info")
    if info is None:
        raise ForkInputError(f"{path}.info", "missing")
    if not isinstance(info, dict):
        raise ForkInputError(f"{path}.info", "expected an object")
    info_path = f"{path}.info"
    role = _string(info, "role", info_path)
    msg_id = _string(info, "id", info_path)
    parent_id = _string(info, "parentID", info_path)
    error_line = _error_line(info, info_path) if role == "assistant" else None
    parts = raw.get("parts")
    if parts is None:
        raise ForkInputError(f"{path}.parts", "missing")
    if not isinstance(parts, list | tuple):
        raise ForkInputError(f"{path}.parts", "expected an array")
    message = Message(
        meta=MessageMeta(role, msg_id, parent_id, info.get("summary") is True, []),
        error_line=error_line,
    )
    last_tool_name: str | None = None
    for j, part in enumerate(parts):
        part_path = f"{path}.parts[{j}]"
        if not isinstance(part, dict):
            raise ForkInputError(part_path, "expected an object")
        if part.get("type") is None:
            raise ForkInputError(f"{part_path}.type", "missing")
        kind = _string(part, "type", part_path)
        if kind == "text":
            text = _string(part, "text", part_path)
            ignored = _boolean(part, "ignored", part_path)
            if text and not ignored:
                message.parts.append(text)
        elif kind == "tool":
            call = _read_tool(part, part_path)
            last_tool_name = call.name
            message.parts.append(call)
        elif kind == "tool_result":
            text = _string(part, "text", part_path)
            name = _string(part, "tool", part_path)
            alt_name = _string(part, "name", part_path)
            if text:
                message.parts.append(ToolResult(name or alt_name or last_tool_name or "", text))
        elif kind == "compaction":
            tail_start_id = _string(part, "tail_start_id", part_path)
            if role == "user":
                message.meta.markers.append(tail_start_id)
    return message


def _error_line(info: dict[str, Any], path: str) -> str | None:
    error = _object(info, "error", path)
    if error is None:
        return None
    error_path = f"{path}.error"
    name = _string(error, "name", error_path) or "Error"
    data = _object(error, "data", error_path)
    detail = _string(data, "message", f"{error_path}.data") if data is not None else None
    return f"[Error: {name}] {detail}" if detail else f"[Error: {name}]"


def _read_tool(part: dict[str, Any], path: str) -> ToolCall:
    tool = _string(part, "tool", path)
    alt_name = _string(part, "name", path)
    name = tool or alt_name or "unknown"
    state = _object(part, "state", path)
    if state is None:
        return ToolCall(name, False, None, None, None, False)
    state_path = f"{path}.state"
    status = _string(state, "status", state_path)
    input_json = None
    if "input" in state:
        check_json_value(state["input"], f"{state_path}.input")
        input_json = dump_input(state["input"])
    result: str | None = None
    compacted = False
    if status == "completed":
        result = _string(state, "output", state_path) or ""
        time = _object(state, "time", state_path)
        if time is not None:
            compacted = _number(time, "compacted", f"{state_path}.time") is not None
    elif status == "error":
        result = _string(state, "error", state_path) or ""
    return ToolCall(name, True, input_json, status, result, compacted)
