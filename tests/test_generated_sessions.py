"""Both engines, and the plain yardstick of the benchmarks, agree on every generated session shape
(`benches/generate.py`, 200 messages), from dicts and from JSON bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from asyncagents import build_fork_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))

from generate import SHAPES, generate, session_bytes, session_objects
from plain_fork import plain_fork


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_engines_and_yardstick_agree_on_every_shape(shape):
    data = session_bytes(200, shape)
    objects = session_objects(200, shape)
    reference = build_fork_context(objects, engine="python")
    assert build_fork_context(data, engine="python") == reference
    assert build_fork_context(objects, engine="rust") == reference
    assert build_fork_context(data, engine="rust") == reference
    text, stats = plain_fork(objects)
    assert text == reference.text
    assert stats == reference.stats.model_dump()
    assert plain_fork(data) == (text, stats)
    s = reference.stats
    assert s.original_count == 200
    assert 0 < s.total_chars <= 200_000
    assert reference.text.startswith("You are working with forked context")


def test_shapes_are_deterministic_and_have_their_features():
    assert generate(120, "legacy") == generate(120, "legacy")
    legacy = [p for m in generate(120, "legacy") for p in m["parts"] if p["type"] == "tool"]
    assert legacy and all("status" not in p["state"] and "input" in p["state"] for p in legacy)
    small = [m for m in generate(60, "small_parts") if m["info"]["role"] == "assistant"]
    assert min(len(m["parts"]) for m in small) >= 20
    huge = generate(40, "huge_output")[-3]["parts"][0]["state"]["output"]
    assert len(huge) == 5_000_000
    deep = generate(600, "deep_compaction")
    assert sum(1 for m in deep if m["info"].get("summary") is True) == 5
    ctx = build_fork_context(deep, engine="python")
    assert ctx.stats.compaction_detected
    errors = generate(80, "tool_errors")
    outputs = [
        p["state"].get("output", "") for m in errors for p in m["parts"] if p["type"] == "tool"
    ]
    assert outputs and all("error" in o or "failed" in o for o in outputs if len(o) > 100)


class _Key(str):
    """A str subclass as a dict key: equal to the plain key, but not the same object."""


def _rekeyed(value):
    if isinstance(value, dict):
        return {_Key(k): _rekeyed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rekeyed(v) for v in value]
    return value


def test_key_objects_of_any_origin_read_the_same():
    """The Rust walk looks keys up with the caller's own key objects once it has seen them (one
    per document from `json.loads`). Messages parsed one by one (a key object per message) or
    keyed by str subclasses must read exactly as the shared-key session does."""
    import json

    data = session_bytes(200, "mixed")
    shared = session_objects(200, "mixed")
    reference = build_fork_context(shared, engine="python")
    assert build_fork_context(shared, engine="rust") == reference
    one_by_one = [json.loads(json.dumps(m)) for m in json.loads(data)]
    assert build_fork_context(one_by_one, engine="rust") == reference
    mixed_origin = shared[:100] + [_rekeyed(m) for m in shared[100:]]
    assert build_fork_context(mixed_origin, engine="rust") == reference
    assert build_fork_context(mixed_origin, engine="python") == reference
