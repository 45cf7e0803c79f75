"""Reference stage 3a: each kept message as its transcript block."""

from __future__ import annotations

from ..config import ForkConfig
from .session import Message, ToolCall, ToolResult, dump_input


def label(role: str | None) -> str:
    """`User`, `Agent`, `Unknown`, or the role with its first letter upper-cased."""
    if role == "user":
        return "User"
    if role == "assistant":
        return "Agent"
    if not role:
        return "Unknown"
    return role[0].upper() + role[1:]


#: the label line of the two common roles, made once
_HEADS = {role: "\n" + label(role) + ":" for role in ("user", "assistant")}


def params_limits(config: ForkConfig) -> tuple[int, ...]:
    """`config.params_limit` of each tier, indexed by it, and at 0 (a call without a result)
    tier 1's: looked up by `format_message` for every call it writes."""
    return tuple(config.params_limit(tier) for tier in (1, 1, 2, 3))


def params_preview(call: ToolCall, limit: int) -> str:
    """`[Tool: name]`, then the parameters JSON cut to `limit` characters plus `...`."""
    if call.state is None or "input" not in call.state:
        return f"[Tool: {call.name}]"
    preview = dump_input(call.state["input"])
    if len(preview) > limit:
        preview = preview[:limit] + "..."
    return f"[Tool: {call.name}] {preview}"


def format_message(
    message: Message,
    rendered: dict[ToolCall | ToolResult, tuple[str, int]],
    limits: tuple[int, ...],
) -> tuple[str, str]:
    """The message's label line and its body (every following line, each led by a newline).

    `rendered` holds the cut text and tier of each result of the message; `limits` are the
    parameter limits by tier (`params_limits`). The parts are walked from the last, so that
    a legacy call knows the tier of the tool_result after it.
    """
    lines: list[str] = []
    next_tier = 0  # tier of the nearest tool_result after this part; 0: none
    for part in reversed(message.parts):
        if isinstance(part, str):
            lines.append(part)
            continue
        result = rendered.get(part)
        # "[Tool result]" and the text as two lines: the join puts the newline between them
        # without a copy of the text
        if isinstance(part, ToolResult):
            assert result is not None
            lines += (result[0], "[Tool result]")
            next_tier = result[1]
            continue
        if result is not None:
            lines += (result[0], "[Tool result]")
        tier = next_tier if part.legacy else result[1] if result is not None else 0
        lines.append(params_preview(part, limits[tier]))
    lines.append("")  # first once reversed: the join then leads with a newline, no copy
    lines.reverse()
    if message.error_line is not None:
        lines.append(message.error_line)
    body = "\n".join(lines) if len(lines) > 1 else ""
    head = _HEADS.get(message.role or "") or "\n" + label(message.role) + ":"
    return head, body
