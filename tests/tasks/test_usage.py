"""Counting a session's tokens and cost from its assistant messages, and how they are shown."""

from __future__ import annotations

from typing import Any

import pytest
from asyncagents.tasks.guards import (
    cost_reason,
    idle_reason,
    runtime_reason,
    tokens_reason,
    tool_calls_reason,
    tree_cost_reason,
)
from asyncagents.tasks.models import TaskUsage
from asyncagents.tasks.usage import (
    UsageCounter,
    message_usage,
    session_usage,
    short_count,
    usage_compact,
    usd,
)


def _info(mid: str, **tokens: Any) -> dict[str, Any]:
    cost = tokens.pop("cost", 0.0)
    return {
        "id": mid,
        "role": "assistant",
        "providerID": "prov",
        "modelID": tokens.pop("model", "m"),
        "tokens": {
            "total": 999,  # not counted: the five counts are
            "input": tokens.get("input", 0),
            "output": tokens.get("output", 0),
            "reasoning": tokens.get("reasoning", 0),
            "cache": {"read": tokens.get("read", 0), "write": tokens.get("write", 0)},
        },
        "cost": cost,
    }


def test_a_message_records_five_counts_and_a_cost() -> None:
    assert message_usage(
        _info("m1", input=5, output=4, reasoning=3, read=2, write=1, cost=0.5)
    ) == (
        TaskUsage(
            input_tokens=5,
            output_tokens=4,
            reasoning_tokens=3,
            cache_read_tokens=2,
            cache_write_tokens=1,
            cost=0.5,
        )
    )
    assert message_usage({"id": "u", "role": "user"}) is None
    # garbage from a server is read as nothing, never as a crash or a negative spend
    odd = {"id": "m", "role": "assistant", "tokens": {"input": -4, "cache": "x"}, "cost": "1"}
    assert message_usage(odd) == TaskUsage()
    assert message_usage({"id": "m", "role": "assistant", "cost": float("nan")}) == TaskUsage()


def test_each_message_counts_once_and_never_goes_back() -> None:
    counter = UsageCounter()
    assert not counter.add(_info("m1"))  # a step still streaming adds nothing
    assert counter.add(_info("m1", input=10, cost=0.1))
    assert not counter.add(_info("m1", input=10, cost=0.1))  # the same copy again
    assert not counter.add(_info("m1"))  # an older copy (a read racing an event)
    assert counter.add(_info("m2", output=7, cost=0.2, model="other"))
    assert counter.total() == TaskUsage(input_tokens=10, output_tokens=7, cost=0.1 + 0.2)
    assert counter.since("m1") == TaskUsage(output_tokens=7, cost=0.2)
    assert counter.by_model() == {
        "prov/m": TaskUsage(input_tokens=10, cost=0.1),
        "prov/other": TaskUsage(output_tokens=7, cost=0.2),
    }
    assert not counter.complete
    messages = [{"info": _info("m1", input=10, cost=0.1)}, {"info": {"id": "u2", "role": "user"}}]
    counter.add_messages(messages)
    assert counter.complete
    total, turn, by_model = session_usage(messages, "u2")
    assert (total, turn) == (TaskUsage(input_tokens=10, cost=0.1), TaskUsage())
    assert by_model == {"prov/m": TaskUsage(input_tokens=10, cost=0.1)}


@pytest.mark.parametrize(
    ("value", "text"),
    [(10, "$10.00"), (0, "$0.00"), (1.5, "$1.50"), (0.0123, "$0.0123"), (0.01234, "$0.0123")],
)
def test_dollars(value: float, text: str) -> None:
    assert usd(value) == text


def test_compact_counts() -> None:
    assert [short_count(n) for n in (950, 12_345, 999_949, 999_950, 4_500_000)] == [
        "950",
        "12.3k",
        "999.9k",
        "1.0M",
        "4.5M",
    ]
    assert usage_compact(TaskUsage(input_tokens=12_000, output_tokens=345, cost=0.05)) == (
        "12.3k tokens, $0.05"
    )


def test_every_guard_reason_names_its_limit_and_the_value_reached() -> None:
    assert idle_reason(300) == "stopped: no progress for 300 s while busy (idle_timeout)"
    assert idle_reason(2.5) == "stopped: no progress for 2.5 s while busy (idle_timeout)"
    assert runtime_reason(1800) == "stopped: the turn ran for 1800 s (max_runtime)"
    assert tool_calls_reason(201, 200) == (
        "stopped: 201 tool calls in this turn, over 200 (max_tool_calls)"
    )
    assert tokens_reason(10_000_123, 10_000_000) == (
        "stopped: 10,000,123 tokens used, over 10,000,000 (max_tokens)"
    )
    assert cost_reason(10.0123, 10) == "stopped: the task cost $10.0123, over $10.00 (max_cost)"
    assert tree_cost_reason("ses_1", 12.5, 10) == (
        "stopped: the tasks of session `ses_1` cost $12.50 together, over $10.00 (max_cost)"
    )
