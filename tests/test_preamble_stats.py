"""The preamble, every line variant exactly; stats and their camelCase aliases; constants."""

from __future__ import annotations

import asyncagents.constants as c
import pytest
from asyncagents import ForkConfig, ForkStats, build_fork_context
from fork_builders import CLEARED, assistant, block, compaction, framed, text, tool, user
from pydantic import ValidationError

ADVICE = "If you need complete file contents or detailed results, re-read the files directly."


def test_preamble_plain(fork):
    ctx = fork([user("msg_1", text("q")), assistant("msg_2", tool("read", {}, output="o"))])
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- No compaction detected\n"
        "- Tool results: 1 full, 0 truncated to 3000 chars, 0 truncated to 500 chars\n"
        "- All messages preserved\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    assert ctx.text == ctx.preamble + "\n\n" + ctx.context
    assert ctx.context == framed(
        block("User", "q"), block("Agent", "[Tool: read] {}", "[Tool result]\no")
    )


def every_variant_session(huge: int) -> list[dict]:
    msgs = [
        user("msg_00", text("old")),
        user("msg_01", compaction()),
        assistant("msg_02", text("SUMMARY"), parent="msg_01", summary=True),
        assistant("msg_03", tool("read", {}, output="stored", compacted=1767000000000)),
    ]
    msgs += [assistant(f"msg_1{i}", tool("grep", {}, output="g" * 600)) for i in range(7)]
    msgs.append(user("msg_20", text("x" * huge)))
    return msgs


def test_preamble_every_line(fork):
    ctx = fork(every_variant_session(250_000))
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- Compaction summary included (messages before compaction removed)\n"
        "- Tool results: 5 full, 2 truncated to 3000 chars, 0 truncated to 500 chars\n"
        "- 1 tool results were already cleared by compaction\n"
        "- 9 oldest messages removed to fit 200000 char budget\n"
        "- The newest message was cut to fit the 200000 char budget\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    assert ctx.text == ctx.preamble + "\n\n" + ctx.context


def test_preamble_numbers_come_from_the_config(fork):
    config = ForkConfig(
        char_budget=1_000,
        char_no_removal=10,
        tier1_count=2,
        tier2_count=3,
        tier2_limit=1_234,
        tier3_limit=56,
    )
    ctx = fork(every_variant_session(5_000), config)
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- Compaction summary included (messages before compaction removed)\n"
        "- Tool results: 2 full, 3 truncated to 1234 chars, 2 truncated to 56 chars\n"
        "- 1 tool results were already cleared by compaction\n"
        "- 9 oldest messages removed to fit 1000 char budget\n"
        "- The newest message was cut to fit the 1000 char budget\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    s = ctx.stats
    assert (s.truncated_results, s.head_tail_applied, s.compacted_results) == (2, 0, 1)


def test_stats_fields_and_camel_case_aliases(fork):
    ctx = fork(every_variant_session(250_000))
    s = ctx.stats
    assert isinstance(s, ForkStats)
    assert ctx.context.startswith("<inherited_context>\nUser:\n" + "x" * 1000)
    expected = {
        "originalCount": 12,
        "finalCount": 1,
        "totalChars": len(ctx.context),
        "truncatedResults": 0,
        "removedMessages": 9,
        "compactionDetected": True,
        "compactionSliceIndex": 2,
        "tierDistribution": {"tier1": 5, "tier2": 2, "tier3": 0},
        "headTailApplied": 0,
        "compactedResults": 1,
        "compactionTailMessages": 0,
        "hardCapped": True,
    }
    assert s.model_dump(by_alias=True) == expected
    assert s.model_dump() == {
        "original_count": 12,
        "final_count": 1,
        "total_chars": len(ctx.context),
        "truncated_results": 0,
        "removed_messages": 9,
        "compaction_detected": True,
        "compaction_slice_index": 2,
        "tier_distribution": {"tier1": 5, "tier2": 2, "tier3": 0},
        "head_tail_applied": 0,
        "compacted_results": 1,
        "compaction_tail_messages": 0,
        "hard_capped": True,
    }
    assert list(s.model_dump(by_alias=True)) == list(expected)
    assert ForkStats.model_validate(expected) == s


def test_stats_of_a_plain_session(fork):
    msgs = [
        user("msg_1", text("q")),
        assistant("msg_2", tool("bash", {}, output="E" * 10 + "rror" + "y" * 4000)),
        assistant("msg_3", tool("read", {}, output=CLEARED)),
    ]
    ctx = fork(msgs, ForkConfig(tier1_count=1))
    assert ctx.stats.model_dump(by_alias=True) == {
        "originalCount": 3,
        "finalCount": 3,
        "totalChars": len(ctx.context),
        "truncatedResults": 1,
        "removedMessages": 0,
        "compactionDetected": False,
        "compactionSliceIndex": -1,
        "tierDistribution": {"tier1": 0, "tier2": 1, "tier3": 0},
        "headTailApplied": 1,
        "compactedResults": 1,
        "compactionTailMessages": 0,
        "hardCapped": False,
    }


def test_empty_session_stats(fork):
    ctx = fork([])
    assert ctx.stats.model_dump(by_alias=True) == {
        "originalCount": 0,
        "finalCount": 0,
        "totalChars": 0,
        "truncatedResults": 0,
        "removedMessages": 0,
        "compactionDetected": False,
        "compactionSliceIndex": -1,
        "tierDistribution": {"tier1": 0, "tier2": 0, "tier3": 0},
        "headTailApplied": 0,
        "compactedResults": 0,
        "compactionTailMessages": 0,
        "hardCapped": False,
    }


def test_constants_are_the_config_defaults():
    assert c.FORK_CHAR_BUDGET == 200_000
    assert c.FORK_CHAR_NO_REMOVAL == 120_000
    assert (c.FORK_TIER1_COUNT, c.FORK_TIER2_COUNT) == (5, 10)
    assert (c.FORK_TIER2_LIMIT, c.FORK_TIER3_LIMIT) == (3000, 500)
    assert (c.FORK_PARAMS_TIER1, c.FORK_PARAMS_TIER2, c.FORK_PARAMS_TIER3) == (500, 200, 100)
    assert (c.FORK_HEAD_RATIO, c.FORK_TAIL_RATIO) == (0.8, 0.2)
    assert tuple(c.FORK_ERROR_PATTERNS) == (
        "error",
        "Error",
        "ERROR",
        "failed",
        "FAILED",
        "exception",
        "traceback",
    )
    assert tuple(c.FORK_HEAD_TAIL_KEYWORDS) == ("bash", "pty", "exec")
    d = ForkConfig()
    assert (d.char_budget, d.char_no_removal) == (200_000, 120_000)
    assert (d.tier1_count, d.tier2_count, d.tier2_limit, d.tier3_limit) == (5, 10, 3000, 500)
    assert (d.params_tier1, d.params_tier2, d.params_tier3) == (500, 200, 100)
    assert (d.head_ratio, d.tail_ratio) == (0.8, 0.2)
    assert tuple(d.error_patterns) == tuple(c.FORK_ERROR_PATTERNS)
    assert tuple(d.head_tail_keywords) == tuple(c.FORK_HEAD_TAIL_KEYWORDS)


def test_preamble_advice_is_the_last_line(fork):
    ctx = fork([user("msg_1", text("q"))])
    assert ctx.preamble.splitlines()[-1] == ADVICE


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("error_patterns", ("error", "bad\ud800")),
        ("head_tail_keywords", ("\udfff",)),
        ("cleared_marker", "[cleared \ud83d]"),
    ],
)
def test_config_texts_with_a_lone_surrogate_are_refused(field, value):
    """The patterns, keywords and marker are searched for and written: a lone surrogate
    there is refused when the config is made, naming the field, for both engines alike."""
    with pytest.raises(ValidationError) as caught:
        ForkConfig(**{field: value})
    (error,) = caught.value.errors()
    assert error["loc"] == (field,)
    assert error["msg"] == "Value error, contains a lone surrogate"


def test_config_texts_may_be_any_other_unicode():
    config = ForkConfig(error_patterns=("エラー", "é😀"), head_tail_keywords=("\u0301",))
    assert config.error_patterns == ("エラー", "é😀")
    assert config.head_tail_keywords == ("\u0301",)


LONE = "contains a lone surrogate"
INVALID_UPDATES = [
    ({"char_budget": -1}, ("char_budget",), "Input should be greater than or equal to 0"),
    ({"head_ratio": 2.0}, ("head_ratio",), "Input should be less than or equal to 1"),
    ({"tail_ratio": 0.9}, (), "Value error, head_ratio + tail_ratio must not exceed 1"),
    ({"error_patterns": ("\ud800",)}, ("error_patterns",), f"Value error, {LONE}"),
    ({"cleared_marker": None}, ("cleared_marker",), "Input should be a valid string"),
    ({"budget": 5}, ("budget",), "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("update", "loc", "msg"), INVALID_UPDATES)
def test_a_copy_with_an_update_is_validated(update, loc, msg):
    """pydantic's `model_copy(update=…)` skips validation; the config's own does not."""
    with pytest.raises(ValidationError) as caught:
        ForkConfig().model_copy(update=update)
    (error,) = caught.value.errors()
    assert (error["loc"], error["msg"]) == (loc, msg)


@pytest.mark.parametrize(("update", "loc", "msg"), INVALID_UPDATES[:-1])
def test_a_config_that_skipped_validation_is_validated_by_the_fork(fork, update, loc, msg):
    """`model_construct` takes any value of a field (an unknown key it drops); both engines
    refuse such a config alike, naming the field, before reading a message."""
    config = ForkConfig.model_construct(**update)
    with pytest.raises(ValidationError) as caught:
        fork([user("msg_1", text("q"))], config)
    (error,) = caught.value.errors()
    assert (error["loc"], error["msg"]) == (loc, msg)


def test_configs_made_any_way_with_the_same_values_fork_alike(fork):
    messages = [user("msg_1", text("q" * 50)), assistant("msg_2", tool("bash", output="x" * 900))]
    made = ForkConfig(tier1_count=0, tier2_limit=300)
    copied = ForkConfig().model_copy(update={"tier1_count": 0, "tier2_limit": 300})
    constructed = ForkConfig.model_construct(tier1_count=0, tier2_limit=300)
    assert copied == made
    assert constructed.checked() == made
    assert made.checked() is made and copied.checked() is copied
    expected = fork(messages, made)
    assert expected.stats.truncated_results == 1
    assert fork(messages, copied) == expected
    assert fork(messages, constructed) == expected


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_a_config_that_is_not_a_fork_config_is_a_type_error(engine):
    with pytest.raises(TypeError) as caught:
        build_fork_context([user("msg_1", text("q"))], {"char_budget": 5}, engine=engine)  # type: ignore[arg-type]
    assert str(caught.value) == "config must be a ForkConfig, not dict"
