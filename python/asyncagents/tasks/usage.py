"""Tokens and cost of a child session, summed from its assistant messages.

OpenCode records on every assistant message (every step of a turn, and compaction summaries)
``info.tokens`` ``{input, output, reasoning, cache:{read, write}}`` and ``info.cost`` (USD). A
`UsageCounter` keeps the latest of each message by id, from the messages read and from the
``message.updated`` events, so a message counted twice is counted once and the sums only move
forward while a step streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .models import TaskUsage

#: the model key of a message that names none
UNKNOWN_MODEL = "unknown"
_ZERO = TaskUsage()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _cost(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    number = float(value)
    return number if number > 0 and number < float("inf") else 0.0


def message_usage(info: Mapping[str, Any]) -> TaskUsage | None:
    """The usage one assistant message records (None for any other message)."""
    if info.get("role") != "assistant":
        return None
    tokens = info.get("tokens")
    tokens = tokens if isinstance(tokens, Mapping) else {}
    cache = tokens.get("cache")
    cache = cache if isinstance(cache, Mapping) else {}
    return TaskUsage(
        input_tokens=_int(tokens.get("input")),
        output_tokens=_int(tokens.get("output")),
        reasoning_tokens=_int(tokens.get("reasoning")),
        cache_read_tokens=_int(cache.get("read")),
        cache_write_tokens=_int(cache.get("write")),
        cost=_cost(info.get("cost")),
    )


def model_key(info: Mapping[str, Any]) -> str:
    """``providerID/modelID`` of an assistant message."""
    provider, model = info.get("providerID"), info.get("modelID")
    if isinstance(provider, str) and isinstance(model, str) and provider and model:
        return f"{provider}/{model}"
    return UNKNOWN_MODEL


def total(usages: Iterable[TaskUsage]) -> TaskUsage:
    """The sum of `usages` (zero for none)."""
    out = TaskUsage()
    for usage in usages:
        out = out + usage
    return out


class UsageCounter:
    """The usage of each assistant message of one session, by message id."""

    def __init__(self) -> None:
        self._by_message: dict[str, tuple[TaskUsage, str]] = {}
        #: the session's messages were read at least once (the sums include older turns)
        self.complete = False

    def add(self, info: Mapping[str, Any]) -> bool:
        """Count one message's info; True when a sum changed. A message's tokens only grow
        while its step streams, so an older copy (a read racing an event) never lowers them."""
        usage = message_usage(info)
        message_id = info.get("id")
        if usage is None or not isinstance(message_id, str) or not message_id:
            return False
        key = model_key(info)
        old = self._by_message.get(message_id)
        if old is None:
            if usage == _ZERO:
                return False  # nothing to add (yet): a step that is still streaming
        elif (usage.tokens, usage.cost) < (old[0].tokens, old[0].cost) or old == (usage, key):
            return False
        self._by_message[message_id] = (usage, key)
        return True

    def add_messages(self, messages: Sequence[Any]) -> bool:
        """Count every assistant message of a read of the whole session."""
        changed = False
        for message in messages:
            info = message.get("info") if isinstance(message, Mapping) else None
            if isinstance(info, Mapping) and self.add(info):
                changed = True
        self.complete = True
        return changed

    def total(self) -> TaskUsage:
        """Every message counted."""
        return total(usage for usage, _ in self._by_message.values())

    def since(self, after_message_id: str | None) -> TaskUsage:
        """The messages after `after_message_id` (ids sort in creation order): one turn."""
        return total(
            usage
            for message_id, (usage, _) in self._by_message.items()
            if after_message_id is None or message_id > after_message_id
        )

    def by_model(self) -> dict[str, TaskUsage]:
        """Every message counted, by ``providerID/modelID``."""
        out: dict[str, TaskUsage] = {}
        for usage, key in self._by_message.values():
            out[key] = out.get(key, TaskUsage()) + usage
        return out


def usd(value: float) -> str:
    """Dollars with 2 to 4 decimals: ``$10.00``, ``$0.0123``."""
    text = f"{value:.4f}"
    while text.endswith("0") and len(text.split(".")[1]) > 2:
        text = text[:-1]
    return f"${text}"


def short_count(n: int) -> str:
    """A count in at most 5 characters: ``950``, ``12.3k``, ``4.5M``."""
    if n < 1000:
        return str(n)
    if n < 999_950:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def usage_detail(usage: TaskUsage) -> str:
    """Every count and the cost: ``1,234 tokens (input 1,000, ...), $0.0123``."""
    return (
        f"{usage.tokens:,} tokens (input {usage.input_tokens:,}, output {usage.output_tokens:,}, "
        f"reasoning {usage.reasoning_tokens:,}, cache read {usage.cache_read_tokens:,}, cache "
        f"write {usage.cache_write_tokens:,}), {usd(usage.cost)}"
    )


def usage_compact(usage: TaskUsage) -> str:
    """The list's column: ``12.3k tokens, $0.0123``."""
    return f"{short_count(usage.tokens)} tokens, {usd(usage.cost)}"


def session_usage(
    messages: Sequence[Any], after_message_id: str | None
) -> tuple[TaskUsage, TaskUsage, dict[str, TaskUsage]]:
    """(every turn, the turn after `after_message_id`, by model) of a session's messages."""
    counter = UsageCounter()
    counter.add_messages(messages)
    return counter.total(), counter.since(after_message_id), counter.by_model()
