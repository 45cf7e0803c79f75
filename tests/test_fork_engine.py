"""The Rust engine's whole call (`ParsedSession.fork`): stage 1 run in Rust, the config read
once per config object, and the result objects built without validation, each the same as
the reference and as validated models."""

from __future__ import annotations

import copy
import json
import pickle
import sys
from pathlib import Path

import pytest
from asyncagents import ForkConfig, ForkInputError, ForkStats, _core, build_fork_context
from asyncagents.fork import ForkContext
from asyncagents.stats import TierDistribution, engine_stats
from fork_builders import assistant, compaction, text, tool, user

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))
from generate import SHAPES, session_objects


class OrderedDictLike(dict):
    """A dict subclass: its items could come from overridden methods, so it is refused."""


def summary(mid: str, parent: str, body: str = "SUMMARY") -> dict:
    return assistant(mid, text(body), parent=parent, summary=True)


def test_engine_stats_are_the_validated_model() -> None:
    counts = (10, 8, 21891, 1, 2, 4, 0, 3, 1, 2, True, True, 8, 6)
    # as an engine returns them: the context first, turn_removed last
    built = engine_stats(counts[0], ("context", *counts[1:], 0))
    names = [name for name in ForkStats.model_fields if name != "tier_distribution"]
    order = (
        "original_count final_count total_chars truncated_results removed_messages tier1 tier2"
        " tier3 head_tail_applied compacted_results hard_capped compaction_detected"
        " compaction_slice_index compaction_tail_messages"
    ).split()
    values = dict(zip(order, counts, strict=True))
    tiers = {"tier1": 4, "tier2": 0, "tier3": 3}
    validated = ForkStats.model_validate(
        {**{name: values[name] for name in names}, "tier_distribution": tiers}
    )
    assert built == validated
    assert repr(built) == repr(validated)
    assert built.model_dump(by_alias=True) == validated.model_dump(by_alias=True)
    assert built.model_fields_set == validated.model_fields_set
    assert built.tier_distribution == TierDistribution(**tiers)
    assert built.tier_distribution.model_fields_set == {"tier1", "tier2", "tier3"}
    assert hash(built) == hash(validated)
    with pytest.raises(Exception, match="frozen"):
        built.final_count = 3  # type: ignore[misc]


def test_a_constructed_model_is_the_validated_model_in_every_use() -> None:
    """`_core._construct` makes what ``object.__new__`` and four ``object.__setattr__`` calls
    make: the model validated from the same values, in equality, dumps, copies, pickles and
    its fields set (a set of its own, which a copy with an update grows)."""
    stats = ForkStats.model_validate(
        {
            "original_count": 3, "final_count": 2, "total_chars": 99, "truncated_results": 0,
            "removed_messages": 1, "compaction_detected": False, "compaction_slice_index": 0,
            "tier_distribution": {"tier1": 1, "tier2": 0, "tier3": 0}, "head_tail_applied": 0,
            "compacted_results": 0, "compaction_tail_messages": 0, "hard_capped": False,
        }
    )  # fmt: skip
    values = {"text": "p\n\nc", "preamble": "p", "context": "c", "stats": stats}
    made = _core._construct(ForkContext, dict(values))
    validated = ForkContext.model_validate(values)
    assert type(made) is ForkContext
    assert made == validated
    assert repr(made) == repr(validated)
    assert made.model_dump() == validated.model_dump()
    assert made.model_dump_json() == validated.model_dump_json()
    assert hash(made) == hash(validated)
    assert made.model_fields_set == {"text", "preamble", "context", "stats"}
    assert made.__pydantic_extra__ is None
    assert made.__pydantic_private__ is None
    assert pickle.loads(pickle.dumps(made)) == validated
    assert copy.deepcopy(made) == validated
    updated = made.model_copy(update={"text": "other"})
    assert updated.text == "other"
    assert made.text == "p\n\nc"
    other = _core._construct(ForkContext, dict(values))
    assert other.model_fields_set is not made.model_fields_set
    with pytest.raises(Exception, match="frozen"):
        made.text = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cls", "values", "message"),
    [
        ("not a type", {}, "'str' object is not an instance of 'type'"),
        (ForkContext, [("text", "")], "'list' object is not an instance of 'dict'"),
        (
            ForkContext,
            OrderedDictLike(text=""),
            "values must be a dict, not OrderedDictLike (a subclass's methods could give other"
            " items)",
        ),
    ],
)
def test_construct_refuses_what_is_not_a_class_and_a_dict(cls, values, message) -> None:
    with pytest.raises(TypeError) as raised:
        _core._construct(cls, values)
    assert str(raised.value) == message


@pytest.mark.parametrize("shape", SHAPES)
def test_the_whole_call_is_the_reference_and_a_validated_result(shape: str) -> None:
    messages = session_objects(10, shape)
    rust = build_fork_context(messages)
    python = build_fork_context(messages, engine="python")
    assert rust == python
    validated = ForkContext.model_validate(rust.model_dump())
    assert rust == validated
    assert repr(rust) == repr(validated)
    assert rust.model_fields_set == validated.model_fields_set
    assert rust.text == f"{rust.preamble}\n\n{rust.context}"


def test_each_config_object_is_read_for_its_own_values() -> None:
    """The engine keeps what it read of the last config object: a new object (even one with
    the address of a freed one) is read again, and the same object gives the same answer."""
    messages = session_objects(10, "mixed")
    for limit in (50, 400, 50, 3000, 0):
        config = ForkConfig(tier1_count=0, tier2_count=10, tier2_limit=limit, fork_turns=None)
        rust = build_fork_context(messages, config)
        assert rust == build_fork_context(messages, config, engine="python")
        assert rust == build_fork_context(messages, config)
        assert f"truncated to {limit} chars" in rust.preamble
        del config
    for turns in (1, 2, None):
        config = ForkConfig(fork_turns=turns)
        assert build_fork_context(messages, config) == build_fork_context(
            messages, config, engine="python"
        )


def test_fork_answers_none_for_an_unread_body_and_the_wrapper_walks_again() -> None:
    doc = [
        user("msg_h0", text("old")),
        summary("msg_s1", parent="msg_m2", body="EARLY SUMMARY"),
        user("msg_h2", text("kept")),
        user("msg_m1", compaction()),
        summary("msg_s2", parent="msg_m1"),
        user("msg_m2", compaction()),
        user("msg_after", text("after")),
        assistant("msg_reply", tool("read", {"p": 1}, output="o")),
    ]
    assert _core.from_objects(doc).fork(ForkConfig()) is None
    forked = _core.from_objects(doc, every_body=True).fork(ForkConfig())
    assert forked is not None
    assert forked[11:] == (True, 1, 0, 0)
    assert build_fork_context(doc) == build_fork_context(doc, engine="python")


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("engine", ["rust", "python"])
def test_a_body_fault_stage_1_keeps_counts_though_fork_turns_drops_it(
    engine: str, as_json: bool
) -> None:
    """Both engines read the bodies of what stage 1 keeps before they count user turns."""
    doc = [
        user("msg_1", text("a")),
        user("msg_2", {"type": "text", "text": False}),
        user("msg_3", text("b")),
    ]
    config = ForkConfig(fork_turns=1)
    message = r"^messages\[1\]\.parts\[0\]\.text: expected a string$"
    with pytest.raises(ForkInputError, match=message):
        build_fork_context(json.dumps(doc) if as_json else doc, config, engine=engine)
    # without the fault, the same config keeps only the last turn
    doc[1] = user("msg_2", text("c"))
    forked = build_fork_context(json.dumps(doc) if as_json else doc, config, engine=engine)
    assert forked.context == "<inherited_context>\nUser:\nb\n</inherited_context>"
