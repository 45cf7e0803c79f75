"""Reference stage 3a: each kept message as its transcript block."""

from __future__ import annotations

from ..config import ForkConfig
from .session import Message, ToolCall
from .truncate import Result


def label(role: str | None) -> str:
    """`User`, `Agent`, `Unknown`, or the role with its first letter upper-cased."""
    if role == "user":
        return "User"
    if role == "assistant":
        return "Agent"
    if not role:
        return "Unknown"
    return role[0].upper() + role[1:]


def params_preview(call: ToolCall, limit: int) -> str:
    """`[Tool: name]`, then the parameters JSON cut to `limit` characters plus `...`."""
    if call.input_json is None:
        return f"[Tool: {call.name}]"
    preview = call.input_json
    if len(preview) > limit:
        preview = preview[:limit] + "..."
    return f"[Tool: {call.name}] {preview}"


def format_message(
    message: Message,
    m: int,
    results: dict[tuple[int, int], Result],
    params: dict[tuple[int, int], int],
    config: ForkConfig,
) -> tuple[str, str]:
    """The message's label line and its body (every following line, each led by a newline)."""
    lines: list[str] = []
    for p, part in enumerate(message.parts):
        if isinstance(part, str):
            lines.append(part)
            continue
        if isinstance(part, ToolCall):
            lines.append(params_preview(part, params[(m, p)]))
        result = results.get((m, p))
        if result is not None:
            lines.append("[Tool result]\n" + result.text)
    if message.error_line is not None:
        lines.append(message.error_line)
    return "\n" + label(message.meta.role) + ":", "".join("\n" + line for line in lines)
