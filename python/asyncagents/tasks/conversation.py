"""A child session's conversation as readable text, from OpenCode's real message shapes.

Used by ``asyncagents_output`` (``full_session``, ``since_message_id``, ``message_limit``) and by
the dashboard; `TaskManager.read_messages` reads and chooses the messages, this module formats.
Each message starts with a header naming its id, so a caller can ask for what came after it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .backend import JSON
from .errors import UnknownMessageError
from .turns import format_error

#: the longest tool input / output / error shown per tool part (characters)
MAX_TOOL_TEXT = 2000
#: the longest conversation text returned at once; older messages are left out to fit
MAX_CONVERSATION_CHARS = 60_000


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters]"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _tool(part: JSON) -> list[str]:
    state = _dict(part.get("state"))
    status = str(state.get("status") or "unknown")
    name = str(part.get("tool") or "unknown")
    lines = [f"[tool {name} {status}] {_cut(_json(state.get('input', {})), MAX_TOOL_TEXT)}"]
    if status == "completed":
        output = state.get("output")
        time = _dict(state.get("time"))
        if time.get("compacted"):
            lines.append("output: [old tool output cleared by OpenCode]")
        else:
            text = output.rstrip("\n") if isinstance(output, str) else _json(output)
            lines.append(f"output: {_cut(text, MAX_TOOL_TEXT)}")
    elif status == "error":
        lines.append(f"error: {_cut(str(state.get('error') or 'unknown error'), MAX_TOOL_TEXT)}")
    return lines


def format_part(part: JSON) -> list[str]:
    """The lines of one part (empty for bookkeeping parts: step-start, snapshots...)."""
    kind = part.get("type")
    if kind == "text":
        if part.get("ignored"):
            return []
        text = str(part.get("text") or "")
        return [text] if text else []
    if kind == "reasoning":
        text = str(part.get("text") or "")
        return [f"[reasoning] {text}"] if text else []
    if kind == "tool":
        return _tool(part)
    if kind == "file":
        return [f"[file] {part.get('filename') or part.get('url') or ''}".rstrip()]
    if kind == "patch":
        files = _list(part.get("files"))
        return [f"[files changed] {', '.join(str(f) for f in files)}"]
    if kind == "compaction":
        return ["[conversation compacted]"]
    if kind == "subtask":
        return [f"[subtask {part.get('agent') or ''}] {part.get('description') or ''}".rstrip()]
    if kind in ("step-start", "step-finish", "snapshot", "retry", "agent"):
        return []
    return [f"[{kind}]"]


def format_message(message: JSON) -> str:
    """One message: a header ``[<id>] <role> (<agent>)``, then its parts."""
    info = _dict(message.get("info"))
    role = str(info.get("role") or "unknown")
    agent = info.get("agent") if role == "assistant" else None
    header = f"[{info.get('id', '?')}] {role}" + (f" ({agent})" if agent else "")
    if info.get("summary") is True:
        header += " summary"
    lines = [header]
    for part in _list(message.get("parts")):
        if isinstance(part, dict):
            lines.extend(format_part(part))
    if info.get("error"):
        lines.append(f"[error] {format_error(info['error'])[1]}")
    return "\n".join(lines)


def select_messages(
    messages: Sequence[JSON],
    *,
    since_message_id: str | None = None,
    message_limit: int | None = None,
) -> list[JSON]:
    """The messages after `since_message_id` (all when None), then the last `message_limit`.

    Raises `UnknownMessageError` when `since_message_id` is not a message of the session.
    """
    selected = list(messages)
    if since_message_id is not None:
        ids = [str(_dict(m.get("info")).get("id")) for m in selected]
        if since_message_id not in ids:
            raise UnknownMessageError(since_message_id)
        selected = selected[ids.index(since_message_id) + 1 :]
    if message_limit is not None:
        selected = selected[-message_limit:] if message_limit > 0 else []
    return selected


def format_conversation(
    messages: Sequence[JSON], *, total: int | None = None, max_chars: int = MAX_CONVERSATION_CHARS
) -> str:
    """The messages as text, oldest first, newest kept when they do not all fit `max_chars`.

    `total` is how many messages the session has (for the count in the heading).
    """
    total = len(messages) if total is None else total
    blocks: list[str] = []
    size = 0
    for message in reversed(messages):
        block = format_message(message)
        if blocks and size + len(block) + 2 > max_chars:
            break
        blocks.append(_cut(block, max_chars))
        size += len(block) + 2
    blocks.reverse()
    left_out = len(messages) - len(blocks)
    heading = f"Conversation ({len(blocks)} of {total} messages"
    heading += f"; {left_out} older ones left out to fit)" if left_out else ")"
    if not blocks:
        return f"{heading}: no messages."
    return heading + ":\n\n" + "\n\n".join(blocks)
