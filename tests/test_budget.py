"""Stage 3 budget: nothing removed up to 120k and up to 200k, oldest removed above, hard cap."""

from __future__ import annotations

import math
import time

import pytest
from asyncagents import ForkConfig, build_fork_context
from fork_builders import CLOSE, FRAME, OPEN, assistant, block, framed, text, tool, user


def users(*bodies: str) -> list[dict]:
    return [user(f"msg_{i:05d}", text(b)) for i, b in enumerate(bodies)]


def user_blocks(*bodies: str) -> list[str]:
    return [block("User", b) for b in bodies]


def test_at_120k_nothing_is_removed(fork):
    body = "a" * (120_000 - FRAME - 7)
    ctx = fork(users(body))
    assert ctx.context == framed(block("User", body))
    assert ctx.stats.total_chars == 120_000
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (0, 1)


def test_between_120k_and_200k_nothing_is_removed(fork):
    bodies = ["a" * 63_000, "b" * 63_000, "c" * 63_000]
    ctx = fork(users(*bodies))
    assert ctx.stats.total_chars == FRAME + 3 * 63_007 == 189_061
    assert ctx.context == framed(*user_blocks(*bodies))
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (0, 3)
    assert "- All messages preserved" in ctx.preamble.splitlines()


def test_exactly_200k_nothing_is_removed(fork):
    bodies = ["a" * 50_000, "b" * 50_000, "c" * 50_000, "d" * 49_932]
    ctx = fork(users(*bodies))
    assert ctx.stats.total_chars == 200_000
    assert ctx.context == framed(*user_blocks(*bodies))
    assert ctx.stats.removed_messages == 0


def test_one_over_200k_removes_the_oldest(fork):
    bodies = ["a" * 50_000, "b" * 50_000, "c" * 50_000, "d" * 49_933]
    ctx = fork(users(*bodies))
    assert ctx.context == framed(*user_blocks(*bodies[1:]))
    s = ctx.stats
    assert (s.removed_messages, s.final_count, s.original_count) == (1, 3, 4)
    assert s.total_chars == 200_001 - 50_007
    assert s.hard_capped is False
    assert "- 1 oldest messages removed to fit 200000 char budget" in ctx.preamble.splitlines()


def test_removal_stops_when_it_fits_exactly(fork):
    bodies = ["first", "a" * 50_000, "b" * 50_000, "c" * 50_000, "d" * 49_932]
    ctx = fork(users(*bodies))
    assert ctx.stats.total_chars == 200_000
    assert ctx.context == framed(*user_blocks(*bodies[1:]))
    assert ctx.stats.removed_messages == 1


def test_oldest_first_even_when_small(fork):
    bodies = ["s" * 10, "L" * 150_000, "t" * 60_000]
    ctx = fork(users(*bodies))
    assert ctx.context == framed(block("User", "t" * 60_000))
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (2, 1)


def test_many_messages_removed(fork):
    bodies = [chr(ord("a") + i) * 30_000 for i in range(10)]
    ctx = fork(users(*bodies))
    # 40 + k * 30_007 <= 200_000  ->  k = 6
    assert ctx.context == framed(*user_blocks(*bodies[4:]))
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (4, 6)
    assert ctx.stats.total_chars == FRAME + 6 * 30_007


def test_budget_counts_code_points_not_bytes(fork):
    bodies = ["😀" * 70_000, "漢" * 70_000, "e\u0301" * 35_000]
    ctx = fork(users(*bodies))
    assert ctx.context == framed(*user_blocks(*bodies[1:]))
    assert ctx.stats.total_chars == FRAME + 2 * 70_007 == len(ctx.context)
    assert ctx.stats.removed_messages == 1


def test_stage2_stats_are_counted_before_removal(fork):
    big = "r" * 90_000
    msgs = [assistant(f"msg_{i}", tool("read", {}, output=big)) for i in range(3)]
    ctx = fork(msgs)
    s = ctx.stats
    assert (s.removed_messages, s.final_count) == (1, 2)
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        3,
        0,
        0,
    )
    one = block("Agent", "[Tool: read] {}", "[Tool result]\n" + big)
    assert ctx.context == framed(one, one)
    assert "- Tool results: 3 full, 0 truncated to 3000 chars, 0 truncated to 500 chars" in (
        ctx.preamble.splitlines()
    )


def test_small_budget_from_config(fork):
    config = ForkConfig(char_budget=100, char_no_removal=50)
    bodies = ["a" * 20, "b" * 20, "c" * 20]  # 40 + 3 * 27 = 121
    ctx = fork(users(*bodies), config)
    assert ctx.context == framed(*user_blocks(*bodies[1:]))
    assert ctx.stats.total_chars == 94
    assert "- 1 oldest messages removed to fit 100 char budget" in ctx.preamble.splitlines()


def test_no_removal_threshold_above_budget_keeps_everything(fork):
    # "If len(context) <= 120,000, or <= 200,000, nothing is removed": both thresholds hold
    config = ForkConfig(char_budget=100, char_no_removal=1000)
    bodies = ["a" * 20, "b" * 20, "c" * 20]
    ctx = fork(users(*bodies), config)
    assert ctx.context == framed(*user_blocks(*bodies))
    assert (ctx.stats.total_chars, ctx.stats.removed_messages, ctx.stats.hard_capped) == (
        121,
        0,
        False,
    )


# --- hard cap ------------------------------------------------------------------------------------


def capped(label: str, body: str, budget: int) -> str:
    """The hard-capped context of one message, computed from DECISIONS.md by hand."""
    head = "\n" + label + ":"
    limit = max(0, budget - (FRAME + len(head)) - 36)
    h = math.floor(limit * 0.8)
    t = math.floor(limit * 0.2)
    cut = body[:h] + f"\n...[truncated {len(body) - h - t} chars]...\n" + body[len(body) - t :]
    return OPEN + head + cut + CLOSE


def test_hard_cap_literal_small_budget(fork):
    config = ForkConfig(char_budget=100, char_no_removal=0)
    ctx = fork(users("x" * 200), config)
    # L = 100 - 46 - 36 = 18, head 14, tail 3, body is "\n" + 200 x
    assert ctx.context == (
        "<inherited_context>\nUser:\n"
        + "x" * 13
        + "\n...[truncated 184 chars]...\nxxx\n</inherited_context>"
    )
    s = ctx.stats
    assert (s.total_chars, s.hard_capped, s.removed_messages, s.final_count) == (92, True, 0, 1)
    assert ctx.preamble.splitlines()[-3:-1] == [
        "- All messages preserved",
        "- The newest message was cut to fit the 100 char budget",
    ]


def test_hard_cap_default_budget(fork):
    body_text = "a" * 150_000 + "b" * 150_000
    ctx = fork(users(body_text))
    # L = 200_000 - 46 - 36 = 199_918; h = 159_934; t = 39_983; body has 300_001 chars
    expected = (
        "<inherited_context>\nUser:\n"
        + "a" * 150_000
        + "b" * 9_933
        + "\n...[truncated 100084 chars]...\n"
        + "b" * 39_983
        + "\n</inherited_context>"
    )
    assert ctx.context == expected
    assert ctx.context == capped("User", "\n" + body_text, 200_000)
    assert ctx.stats.total_chars == 199_995 <= 200_000
    assert ctx.stats.hard_capped is True


def test_hard_cap_after_removing_older_messages(fork):
    huge = "h" * 250_000
    msgs = [
        user("msg_0", text("q")),
        assistant("msg_1", text("before"), tool("bash", {"command": "cat big"}, output=huge)),
    ]
    ctx = fork(msgs)
    body = "\nbefore" + '\n[Tool: bash] {"command":"cat big"}' + "\n[Tool result]\n" + huge
    assert ctx.context == capped("Agent", body, 200_000)
    s = ctx.stats
    assert (s.removed_messages, s.final_count, s.hard_capped) == (1, 1, True)
    assert s.total_chars == len(ctx.context) <= 200_000
    assert ctx.preamble.splitlines()[-3:-1] == [
        "- 1 oldest messages removed to fit 200000 char budget",
        "- The newest message was cut to fit the 200000 char budget",
    ]


def test_hard_cap_budget_smaller_than_the_frame(fork):
    config = ForkConfig(char_budget=10, char_no_removal=0)
    ctx = fork(users("one", "x" * 200), config)
    assert ctx.context == (
        "<inherited_context>\nUser:\n...[truncated 201 chars]...\n\n</inherited_context>"
    )
    assert (ctx.stats.hard_capped, ctx.stats.removed_messages) == (True, 1)


@pytest.mark.parametrize(
    "unit",
    ["😀", "漢字", "e\u0301", "a😀b", "\U0001f468\u200d\U0001f469"],
    ids=["emoji", "cjk", "combining", "mixed", "zwj"],
)
def test_hard_cap_counts_and_cuts_code_points(fork, unit):
    config = ForkConfig(char_budget=1_003, char_no_removal=0)
    body_text = (unit * 2_000)[:2_000] + "END"
    ctx = fork(users(body_text), config)
    assert ctx.context == capped("User", "\n" + body_text, 1_003)
    assert len(ctx.context) == ctx.stats.total_chars <= 1_003
    assert ctx.stats.hard_capped is True


def test_budget_is_linear_in_messages(engine):
    """20,000 messages, 18,132 of them removed: a re-format per removal would take minutes."""
    msgs = users(*(f"{i:08d}" + "m" * 92 for i in range(20_000)))  # each block 107 chars
    started = time.perf_counter()
    ctx = build_fork_context(msgs, engine=engine)
    elapsed = time.perf_counter() - started
    # 40 + 107 * k <= 200_000  ->  k = 1_868
    assert (ctx.stats.final_count, ctx.stats.removed_messages) == (1_868, 18_132)
    assert ctx.stats.total_chars == 40 + 107 * 1_868
    assert ctx.context.startswith("<inherited_context>\nUser:\n00018132mmm")
    assert elapsed < 10, f"{engine} took {elapsed:.1f}s"
