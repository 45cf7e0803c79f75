"""Reference stage 2: number tool results from the newest, tier them, cut them."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ForkConfig
from .session import ToolCall, ToolResult


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


def wants_head_tail(name: str, is_error: bool, text: str, config: ForkConfig) -> bool:
    """Terminal tools and error-looking output keep their tail: that is where failures show."""
    if is_error:
        return True
    for keyword in config.head_tail_keywords:
        if keyword in name:
            return True
    for pattern in config.error_patterns:  # the first found ends the search
        if pattern in text:
            return True
    return False


class ResultTiers:
    """Numbers results from the newest (call `take` newest first) and counts what it cut.

    Only results that will be rendered get their cut text; for the others (messages the budget
    drops) the counters need lengths and, for a cut result, the error pattern search.
    """

    def __init__(self, config: ForkConfig) -> None:
        self.config = config
        self.counts = ResultCounts()
        self.taken = 0
        self._tier1_end = config.tier1_count
        self._tier2_end = config.tier1_count + config.tier2_count

    def take(self, result: ToolCall | ToolResult, render: bool) -> tuple[str, int]:
        """The next older result's rendered text ("" when not `render`) and tier."""
        config, counts = self.config, self.counts
        index = self.taken
        self.taken += 1
        text = config.cleared_marker if result.compacted else result.result or ""
        if index >= self._tier2_end:
            tier, limit = 3, config.tier3_limit
        elif index >= self._tier1_end:
            tier, limit = 2, config.tier2_limit
        else:
            tier, limit = 1, -1
        if config.cleared_marker in text:
            counts.compacted += 1
            return text, tier
        if tier == 3:
            counts.tier3 += 1
        elif tier == 2:
            counts.tier2 += 1
        else:
            counts.tier1 += 1
        if limit < 0 or len(text) <= limit:
            return text, tier
        counts.truncated += 1
        if wants_head_tail(result.name, result.is_error, text, config):
            counts.head_tail += 1
            return (cut_head_tail(text, limit, config) if render else ""), tier
        return (cut_head_only(text, limit) if render else ""), tier
