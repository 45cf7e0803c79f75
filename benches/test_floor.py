"""The floor (`floor.py`) reads what the engines read: the same tool results, and a fault
where a body the engines keep has one. Runs in CI's smoke step with the benchmarks."""

from __future__ import annotations

import copy

import pytest
from asyncagents import build_fork_context
from floor import build, output_texts, result_texts, walker
from generate import SHAPES, session_objects


@pytest.fixture(scope="module")
def floor():
    return build()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_floor_counts_the_results_the_engines_count(floor, shape):
    messages = session_objects(200, shape)
    assert walker(floor, messages)() == _results_counted(messages)


@pytest.mark.parametrize(
    ("field", "value"),
    [("type", 7), ("text", ["not", "a", "string"]), ("ignored", "yes")],
)
def test_the_floor_stops_at_a_fault_of_a_kept_body(floor, field, value):
    messages = copy.deepcopy(session_objects(10, "text_heavy"))
    part = next(p for m in messages for p in m["parts"] if p["type"] == "text")
    walk = walker(floor, messages)
    part[field] = value
    with pytest.raises(ValueError, match="fault"):
        walk()


@pytest.mark.parametrize("shape", ["tool_ascii", "non_ascii", "legacy", "huge_output"])
def test_the_results_read_are_the_texts_of_the_results_counted(floor, shape):
    messages = session_objects(200, shape)
    texts = result_texts(floor, messages)
    assert len(texts) == _results_counted(messages)
    assert floor.read(texts) == sum(len(text) * _width(text) for text in texts)


def _results_counted(messages: list) -> int:
    """The tool results the Rust engine counts: in the tiers, or cleared."""
    stats = build_fork_context(messages).stats
    tiers = stats.tier_distribution
    return tiers.tier1 + tiers.tier2 + tiers.tier3 + stats.compacted_results


def _width(text: str) -> int:
    """Bytes a code point in CPython's layout of `text`."""
    top = max(map(ord, text), default=0)
    return 1 if top < 0x100 else 2 if top < 0x10000 else 4


@pytest.mark.parametrize("shape", ["mixed", "text_heavy", "huge_output"])
def test_the_output_written_is_the_context_and_the_text(floor, shape):
    messages = session_objects(200, shape)
    made = build_fork_context(messages)
    texts = output_texts(messages)
    assert texts == [made.context, made.text]
    assert floor.write(texts) == sum(len(text) * _width(text) for text in texts)
