"""Reference stage 2: number tool results from the newest, tier them, cut them."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ForkConfig
from .session import Message, ToolCall, ToolResult


@dataclass(slots=True)
class ResultCounts:
    """Stage 2 counters, over every kept message (before stage 3 removes any)."""

    truncated: int = 0
    head_tail: int = 0
    tier1: int = 0
    tier2: int = 0
    tier3: int = 0
    compacted: int = 0


def cut_head_only(text: str, limit: int) -> str:
    """`text[:L]` and a marker saying how many characters were dropped."""
    return f"{text[:limit]}\n...[truncated {len(text) - limit} chars]..."


def cut_head_tail(text: str, limit: int, config: ForkConfig) -> str:
    """Keep floor(L*head) chars of the head and floor(L*tail) of the tail around a marker."""
    head = int(limit * config.head_ratio)
    tail = int(limit * config.tail_ratio)
    size = len(text)
    return f"{text[:head]}\n...[truncated {size - head - tail} chars]...\n{text[size - tail :]}"


def wants_head_tail(name: str, status: str | None, text: str, config: ForkConfig) -> bool:
    """Terminal tools and error-looking output keep their tail: that is where failures show."""
    return (
        any(keyword in name for keyword in config.head_tail_keywords)
        or status == "error"
        or any(pattern in text for pattern in config.error_patterns)
    )


def result_text(part: ToolCall | ToolResult, config: ForkConfig) -> str | None:
    """The raw result text of a part, or None when it has no result."""
    if isinstance(part, ToolResult):
        return part.text
    if part.result is None:
        return None
    return config.cleared_marker if part.compacted else part.result


@dataclass(slots=True)
class Result:
    """One tool result with the tier-limited text it renders as."""

    text: str
    tier: int


def process_results(
    messages: list[Message], config: ForkConfig
) -> tuple[dict[tuple[int, int], Result], dict[tuple[int, int], int], ResultCounts]:
    """Tier and cut every result of the kept messages.

    Returns the rendered result per (message position, part position), the parameter limit
    per tool part that has one, and the counters.
    """
    located: list[tuple[int, int, ToolCall | ToolResult, str]] = []
    for m, message in enumerate(messages):
        for p, part in enumerate(message.parts):
            if isinstance(part, ToolCall | ToolResult):
                text = result_text(part, config)
                if text is not None:
                    located.append((m, p, part, text))

    counts = ResultCounts()
    results: dict[tuple[int, int], Result] = {}
    total = len(located)
    for position, (m, p, part, text) in enumerate(located):
        tier = config.tier_of(total - 1 - position)
        if config.cleared_marker in text:
            counts.compacted += 1
            results[(m, p)] = Result(text, tier)
            continue
        if tier == 1:
            counts.tier1 += 1
        elif tier == 2:
            counts.tier2 += 1
        else:
            counts.tier3 += 1
        limit = config.result_limit(tier)
        if limit is not None and len(text) > limit:
            counts.truncated += 1
            status = part.status if isinstance(part, ToolCall) else None
            if wants_head_tail(part.name, status, text, config):
                counts.head_tail += 1
                text = cut_head_tail(text, limit, config)
            else:
                text = cut_head_only(text, limit)
        results[(m, p)] = Result(text, tier)

    params: dict[tuple[int, int], int] = {}
    for m, message in enumerate(messages):
        for p, part in enumerate(message.parts):
            if isinstance(part, ToolCall):
                params[(m, p)] = _params_limit(message, m, p, part, results, config)
    return results, params, counts


def _params_limit(
    message: Message,
    m: int,
    p: int,
    call: ToolCall,
    results: dict[tuple[int, int], Result],
    config: ForkConfig,
) -> int:
    """A call's own result tier sets its limit; a legacy call (no ``state.status``) takes the
    tier of the next tool_result of its message."""
    if call.status is not None:
        own = results.get((m, p))
        return config.params_limit(own.tier) if own else config.params_tier1
    for q in range(p + 1, len(message.parts)):
        if isinstance(message.parts[q], ToolResult):
            return config.params_limit(results[(m, q)].tier)
    return config.params_tier1
