"""Stage 2: tool results numbered from the newest, tiers 5/10/rest, cuts, cleared results,
parameter limits by tier."""

from __future__ import annotations

import json
import sys

import pytest
from asyncagents import ForkConfig, build_fork_context
from fork_builders import (
    CLEARED,
    assistant,
    block,
    compaction,
    framed,
    head_only,
    head_tail,
    text,
    tool,
    tool_result,
    user,
)

T_COMPACTED = 1767000009999
ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def filler(n: int, seed: int = 0) -> str:
    """`n` characters with no error pattern, each position distinguishable from its neighbours."""
    return "".join(ALNUM[(i * 7 + seed) % len(ALNUM)] for i in range(n))


def session_of_results(outputs: list[str], name: str = "read") -> list[dict]:
    """One user prompt, then one assistant step per result, oldest output first."""
    msgs = [user("msg_u", text("go"))]
    for i, out in enumerate(outputs):
        msgs.append(assistant(f"msg_a{i:03d}", tool(name, {"i": i}, output=out)))
    return msgs


def result_lines(ctx_text: str) -> list[str]:
    """The rendered result texts, oldest first (each result is one Agent message here)."""
    body = ctx_text.removeprefix("<inherited_context>").removesuffix("\n</inherited_context>")
    out = []
    for chunk in body.split("\nAgent:\n")[1:]:
        _call, _, result = chunk.partition("\n[Tool result]\n")
        out.append(result)
    return out


# --- tiny config: every string literal -----------------------------------------------------------

SMALL = ForkConfig(tier1_count=1, tier2_count=1, tier2_limit=10, tier3_limit=5)
SIXTEEN = "0123456789ABCDEF"


def test_small_config_head_only_literal(fork):
    ctx = fork(session_of_results([SIXTEEN, SIXTEEN, SIXTEEN]), SMALL)
    assert ctx.context == framed(
        block("User", "go"),
        block("Agent", '[Tool: read] {"i":0}', "[Tool result]\n01234\n...[truncated 11 chars]..."),
        block(
            "Agent", '[Tool: read] {"i":1}', "[Tool result]\n0123456789\n...[truncated 6 chars]..."
        ),
        block("Agent", '[Tool: read] {"i":2}', "[Tool result]\n0123456789ABCDEF"),
    )
    s = ctx.stats
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        1,
        1,
        1,
    )
    assert (s.truncated_results, s.head_tail_applied) == (2, 0)


def test_small_config_head_tail_literal(fork):
    ctx = fork(session_of_results([SIXTEEN, SIXTEEN, SIXTEEN], name="bash"), SMALL)
    assert ctx.context == framed(
        block("User", "go"),
        block(
            "Agent", '[Tool: bash] {"i":0}', "[Tool result]\n0123\n...[truncated 11 chars]...\nF"
        ),
        block(
            "Agent",
            '[Tool: bash] {"i":1}',
            "[Tool result]\n01234567\n...[truncated 6 chars]...\nEF",
        ),
        block("Agent", '[Tool: bash] {"i":2}', "[Tool result]\n0123456789ABCDEF"),
    )
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (2, 2)


# --- default tiers -------------------------------------------------------------------------------


def test_tiers_5_10_rest_with_default_limits(fork):
    outputs = [filler(4000, seed=i) for i in range(20)]  # index 19 is the newest
    ctx = fork(session_of_results(outputs))
    got = result_lines(ctx.context)
    for i, out in enumerate(outputs):
        index = 19 - i
        if index < 5:
            assert got[i] == out
        elif index < 15:
            assert got[i] == out[:3000] + "\n...[truncated 1000 chars]..."
        else:
            assert got[i] == out[:500] + "\n...[truncated 3500 chars]..."
    s = ctx.stats
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        5,
        10,
        5,
    )
    assert (s.truncated_results, s.head_tail_applied) == (15, 0)


def test_tier_sizes_come_from_config(fork):
    config = ForkConfig(tier1_count=2, tier2_count=3, tier2_limit=100, tier3_limit=50)
    outputs = [filler(120, seed=i) for i in range(7)]
    ctx = fork(session_of_results(outputs), config)
    got = result_lines(ctx.context)
    assert got[6] == outputs[6] and got[5] == outputs[5]
    assert got[2:5] == [head_only(o, 100) for o in outputs[2:5]]
    assert got[:2] == [head_only(o, 50) for o in outputs[:2]]
    td = ctx.stats.tier_distribution
    assert (td.tier1, td.tier2, td.tier3) == (2, 3, 2)


def test_several_results_in_one_message_are_numbered_from_the_last_part(fork):
    config = ForkConfig(tier1_count=1, tier2_count=1, tier2_limit=4, tier3_limit=2)
    msgs = [
        assistant(
            "msg_1",
            tool("read", {}, output="aaaaaa"),
            tool("read", {}, output="bbbbbb"),
            tool("read", {}, output="cccccc"),
        )
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\naa\n...[truncated 4 chars]...",
            "[Tool: read] {}",
            "[Tool result]\nbbbb\n...[truncated 2 chars]...",
            "[Tool: read] {}",
            "[Tool result]\ncccccc",
        )
    )


def test_result_exactly_at_limit_is_not_cut(fork):
    outputs = [filler(500, 1), filler(501, 2)] + [filler(3000, 3)] * 9 + [filler(3001, 4)]
    outputs += [filler(10, 5)] * 5
    ctx = fork(session_of_results(outputs))
    got = result_lines(ctx.context)
    assert got[0] == outputs[0]
    assert got[1] == outputs[1][:500] + "\n...[truncated 1 chars]..."
    assert got[2:11] == outputs[2:11]
    assert got[11] == outputs[11][:3000] + "\n...[truncated 1 chars]..."
    assert ctx.stats.truncated_results == 2


# --- head+tail selection -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bash", "mybash_tool", "pty_spawn", "exec_command", "execute"])
def test_head_tail_for_terminal_tool_names(fork, name):
    out = filler(800)
    config = ForkConfig(tier1_count=0, tier2_count=0)  # every result in tier 3 (limit 500)
    ctx = fork([assistant("msg_1", tool(name, {}, output=out))], config)
    assert ctx.context == framed(
        block("Agent", f"[Tool: {name}] {{}}", "[Tool result]\n" + head_tail(out, 500))
    )
    assert head_tail(out, 500) == out[:400] + "\n...[truncated 300 chars]...\n" + out[700:]
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (1, 1)


@pytest.mark.parametrize("name", ["read", "Bash", "PTY", "grep", "ba-sh"])
def test_head_only_for_other_tool_names(fork, name):
    out = filler(800)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool(name, {}, output=out))], config)
    assert ctx.context == framed(
        block(
            "Agent",
            f"[Tool: {name}] {{}}",
            "[Tool result]\n" + out[:500] + "\n...[truncated 300 chars]...",
        )
    )
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (1, 0)


def test_head_tail_uses_the_name_field_when_tool_is_absent(fork):
    out = filler(800)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool(None, {}, name_field="bash", output=out))], config)
    assert ctx.context == framed(
        block("Agent", "[Tool: bash] {}", "[Tool result]\n" + head_tail(out, 500))
    )


def test_head_tail_for_error_status(fork):
    err = filler(800)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, status="error", error=err))], config)
    assert ctx.context == framed(
        block("Agent", "[Tool: read] {}", "[Tool result]\n" + head_tail(err, 500))
    )
    assert ctx.stats.head_tail_applied == 1


@pytest.mark.parametrize(
    "pattern", ["error", "Error", "ERROR", "failed", "FAILED", "exception", "traceback"]
)
@pytest.mark.parametrize("where", ["head", "middle", "tail"])
def test_head_tail_for_error_patterns_anywhere(fork, pattern, where):
    base = filler(1000)
    out = {
        "head": pattern + base,
        "middle": base[:500] + pattern + base[500:],
        "tail": base + pattern,
    }[where]
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    assert ctx.context == framed(
        block("Agent", "[Tool: read] {}", "[Tool result]\n" + head_tail(out, 500))
    )


@pytest.mark.parametrize(
    "near_miss", ["Failed", "Exception", "Traceback (most recent call last)", "eRROR", "fail"]
)
def test_error_patterns_are_case_sensitive(fork, near_miss):
    out = near_miss + filler(1000)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    assert ctx.context == framed(
        block("Agent", "[Tool: read] {}", "[Tool result]\n" + head_only(out, 500))
    )
    assert ctx.stats.head_tail_applied == 0


def test_tier2_head_tail_marker_counts(fork):
    out = "a" * 2500 + "b" * 2500  # 5000 chars, bash, tier 2: h=2400, t=600
    outputs = [out] + [filler(10)] * 5
    ctx = fork(session_of_results(outputs, name="bash"))
    got = result_lines(ctx.context)
    assert got[0] == "a" * 2400 + "\n...[truncated 2000 chars]...\n" + "b" * 600


# --- cleared results -----------------------------------------------------------------------------


def test_compacted_part_renders_the_cleared_literal(fork):
    part = tool(
        "read", {"filePath": "/a"}, output="the full stored output", compacted=1767000000123
    )
    ctx = fork([assistant("msg_1", part)])
    assert ctx.context == framed(
        block(
            "Agent",
            '[Tool: read] {"filePath":"/a"}',
            "[Tool result]\n[Old tool result content cleared]",
        )
    )
    s = ctx.stats
    assert s.compacted_results == 1
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        0,
        0,
        0,
    )
    assert s.truncated_results == 0


def test_compacted_float_timestamp_counts(fork):
    ctx = fork([assistant("msg_1", tool("read", {}, output="x", compacted=1.5))])
    assert ctx.context == framed(block("Agent", "[Tool: read] {}", "[Tool result]\n" + CLEARED))


def test_compacted_null_is_not_cleared(fork):
    ctx = fork([assistant("msg_1", tool("read", {}, output="visible", compacted=None))])
    assert ctx.context == framed(block("Agent", "[Tool: read] {}", "[Tool result]\nvisible"))
    assert ctx.stats.compacted_results == 0


def test_compacted_only_applies_to_completed_parts(fork):
    part = tool("read", {}, status="error", error="File not found")
    part["state"]["time"]["compacted"] = 1767000000123
    ctx = fork([assistant("msg_1", part)])
    assert ctx.context == framed(block("Agent", "[Tool: read] {}", "[Tool result]\nFile not found"))
    assert ctx.stats.compacted_results == 0
    assert ctx.stats.tier_distribution.tier1 == 1


def test_cleared_results_keep_their_index(fork):
    # newest result is cleared: it still takes index 0, so the 6th result is tier 2 (index 5)
    outputs = [filler(4000, seed=i) for i in range(6)]
    msgs = session_of_results(outputs)
    msgs.append(
        assistant("msg_z", tool("read", {"i": 6}, output=filler(4000), compacted=T_COMPACTED))
    )
    ctx = fork(msgs)
    got = result_lines(ctx.context)
    assert got[6] == CLEARED
    assert got[2:6] == outputs[2:6]
    assert got[1] == outputs[1][:3000] + "\n...[truncated 1000 chars]..."
    assert got[0] == outputs[0][:3000] + "\n...[truncated 1000 chars]..."
    s = ctx.stats
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        4,
        2,
        0,
    )
    assert (s.compacted_results, s.truncated_results) == (1, 2)


def test_text_containing_the_literal_passes_through_unchanged(fork):
    long_text = CLEARED + " " + filler(5000)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    msgs = [
        assistant(
            "msg_1",
            tool("bash", {}, output=long_text),
            tool("read", {}, status="error", error="x" * 900 + CLEARED),
            tool_result("legacy " + CLEARED + filler(900), tool="read"),
        )
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: bash] {}",
            "[Tool result]\n" + long_text,
            "[Tool: read] {}",
            "[Tool result]\n" + "x" * 900 + CLEARED,
            "[Tool result]\nlegacy " + CLEARED + filler(900),
        )
    )
    s = ctx.stats
    assert (s.compacted_results, s.truncated_results, s.head_tail_applied) == (3, 0, 0)
    assert (s.tier_distribution.tier1, s.tier_distribution.tier2, s.tier_distribution.tier3) == (
        0,
        0,
        0,
    )


# --- what is and is not a result -----------------------------------------------------------------


def test_pending_running_and_empty_legacy_results_take_no_index(fork):
    config = ForkConfig(tier1_count=1, tier2_count=0, tier3_limit=3)
    msgs = [
        assistant(
            "msg_1",
            tool("read", {}, output="older!"),
            tool("read", {}, output="newer!"),
            tool("bash", {}, status="running"),
            tool("bash", {}, status="pending"),
            tool_result(""),
            tool_result(),
        )
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\nold\n...[truncated 3 chars]...",
            "[Tool: read] {}",
            "[Tool result]\nnewer!",
            "[Tool: bash] {}",
            "[Tool: bash] {}",
        )
    )


def test_legacy_tool_result_name_from_nearest_earlier_tool_part(fork):
    out = filler(800)
    config = ForkConfig(tier1_count=0, tier2_count=0)
    msgs = [
        assistant(
            "msg_1",
            tool("bash", state=None),
            tool("read", state=None),
            tool_result(out),  # nearest earlier tool part: read -> head only
            tool("bash", state=None),
            tool_result(out),  # nearest earlier: bash -> head+tail
            tool_result(out, name="exec_cmd"),  # own name
            tool_result(out, tool="read", name="bash"),  # tool wins over name
        ),
        assistant("msg_2", tool_result(out)),  # no tool part in its message: "" -> head only
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: bash]",
            "[Tool: read]",
            "[Tool result]\n" + head_only(out, 500),
            "[Tool: bash]",
            "[Tool result]\n" + head_tail(out, 500),
            "[Tool result]\n" + head_tail(out, 500),
            "[Tool result]\n" + head_only(out, 500),
        ),
        block("Agent", "[Tool result]\n" + head_only(out, 500)),
    )
    assert ctx.stats.head_tail_applied == 2


# --- parameter limits by tier --------------------------------------------------------------------


def test_parameter_limits_500_200_100_by_tier(fork):
    params = {"pattern": filler(700)}
    as_json = '{"pattern":"' + filler(700) + '"}'
    msgs = [user("msg_u", text("go"))]
    for i in range(16):
        msgs.append(assistant(f"msg_a{i:02d}", tool("grep", params, output="ok")))
    ctx = fork(msgs)
    body = ctx.context.removeprefix("<inherited_context>\nUser:\ngo")
    calls = [chunk.split("\n")[0] for chunk in body.split("\nAgent:\n")[1:]]
    assert calls[0] == "[Tool: grep] " + as_json[:100] + "..."  # index 15, tier 3
    assert calls[1:11] == ["[Tool: grep] " + as_json[:200] + "..."] * 10  # tier 2
    assert calls[11:] == ["[Tool: grep] " + as_json[:500] + "..."] * 5  # tier 1


def test_parameter_limit_boundary(fork):
    exact = {"k": "v" * 492}  # '{"k":"' + 492 + '"}' == 500 chars
    over = {"k": "v" * 493}
    ctx = fork(
        [assistant("msg_1", tool("read", exact, output="x"), tool("read", over, output="y"))]
    )
    exact_json = '{"k":"' + "v" * 492 + '"}'
    assert len(exact_json) == 500
    over_json = '{"k":"' + "v" * 493 + '"}'
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: read] " + exact_json,
            "[Tool result]\nx",
            "[Tool: read] " + over_json[:500] + "...",
            "[Tool result]\ny",
        )
    )


def test_call_without_result_uses_500(fork):
    params = {"command": "x" * 700}
    as_json = '{"command":"' + "x" * 700 + '"}'
    config = ForkConfig(tier1_count=0, tier2_count=0)  # any result would be tier 3
    ctx = fork(
        [
            assistant("msg_1", tool("bash", params, status="running")),
            assistant("msg_2", tool("bash", params, status="pending")),
        ],
        config,
    )
    line = "[Tool: bash] " + as_json[:500] + "..."
    assert ctx.context == framed(block("Agent", line), block("Agent", line))


def test_error_result_sets_the_parameter_tier(fork):
    params = {"filePath": "p" * 300}
    as_json = '{"filePath":"' + "p" * 300 + '"}'
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", params, status="error", error="nope"))], config)
    assert ctx.context == framed(
        block("Agent", "[Tool: read] " + as_json[:100] + "...", "[Tool result]\nnope")
    )


def test_parameter_limits_count_code_points(fork):
    params = {"q": "😀" * 600}
    as_json = '{"q":"' + "😀" * 600 + '"}'
    ctx = fork([assistant("msg_1", tool("grep", params, output="ok"))])
    assert ctx.context == framed(
        block("Agent", "[Tool: grep] " + as_json[:500] + "...", "[Tool result]\nok")
    )
    assert as_json[:500].endswith("😀" * 494)


def test_parameter_limits_from_config(fork):
    config = ForkConfig(
        params_tier1=5, params_tier2=3, params_tier3=1, tier1_count=1, tier2_count=1
    )
    msgs = [assistant(f"msg_{i}", tool("t", {"abcdef": i}, output="o")) for i in range(3)]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block("Agent", "[Tool: t] {...", "[Tool result]\no"),
        block("Agent", '[Tool: t] {"a...', "[Tool result]\no"),
        block("Agent", '[Tool: t] {"abc...', "[Tool result]\no"),
    )


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _Str(str):
    __slots__ = ()


def test_parameter_previews_of_every_python_value_at_every_length(engine):
    # From dicts, Rust writes plain values in place and starts a value over the checked way at
    # the first that is not (a big int, a subclass, a table of general keys): every cut of the
    # preview is still the one of json.dumps.
    general: dict[object, object] = {0: 0, "g": "\u00e9\t"}
    del general[0]
    value = {
        "ascii": 'a "q" \\ \n\x01',
        "wide": "\u00e9\U0001f600\u6f22",
        "nums": [0, -1, 2**63 - 1, 2**70, -(2**64), 1.5, 1e16, -0.0],
        "consts": (True, False, None),
        "sub": _Dict(k=_Str("s\u00e9")),
        "general": general,
    }
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for limit in range(len(expected) + 2):
        msgs = [assistant("msg_1", tool("t", value, output="o"))]
        ctx = build_fork_context(msgs, ForkConfig(params_tier1=limit), engine=engine)
        preview = expected if len(expected) <= limit else expected[:limit] + "..."
        assert ctx.context == framed(block("Agent", "[Tool: t] " + preview, "[Tool result]\no")), (
            limit
        )


def test_a_message_kept_twice_shows_each_preview_at_its_own_tier(fork):
    # The summary comes before its marker, whose tail starts at the summary: kept is
    # [summary, summary (the tail), marker]. The newer copy's call is tier 1 (5 characters),
    # the older one's tier 3 (20): both previews of the one `state.input`, each in full.
    summary = assistant(
        "msg_s",
        tool("read", {"path": "abcdefghijklmnopqrstuvwxyz"}, output="ok"),
        parent="msg_m",
        summary=True,
    )
    marker = user("msg_m", compaction(tail_start_id="msg_s"))
    config = ForkConfig(tier1_count=1, tier2_count=0, params_tier1=5, params_tier3=20)
    ctx = fork([summary, marker], config)
    assert ctx.context == framed(
        block("Agent", '[Tool: read] {"path":"abcdefghijk...', "[Tool result]\nok"),
        block("Agent", '[Tool: read] {"pat...', "[Tool result]\nok"),
        block("User"),
    )
    assert ctx.stats.compaction_tail_messages == 1
    assert ctx.stats.total_chars == len(ctx.context)


# --- non-ASCII results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unit",
    ["😀", "漢", "e\u0301", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001d518", "ü"],
    ids=["emoji", "cjk", "combining", "zwj-family", "astral-math", "latin1"],
)
def test_cuts_count_code_points_and_never_split_them(fork, unit):
    out = unit * (900 // len(unit) + 1)
    out = out[:900]
    config = ForkConfig(tier1_count=0, tier2_count=0)
    msgs = [
        assistant("msg_1", tool("read", {}, output=out)),
        assistant("msg_2", tool("bash", {}, output=out)),
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\n" + out[:500] + "\n...[truncated 400 chars]...",
        ),
        block(
            "Agent",
            "[Tool: bash] {}",
            "[Tool result]\n" + out[:400] + "\n...[truncated 400 chars]...\n" + out[800:],
        ),
    )
    assert ctx.stats.total_chars == len(ctx.context)


# From dicts, the Rust engine copies the code units of a wide str into the context as they are.
# The context must still be a str of the narrowest kind for what it holds (CPython compares the
# kinds first: a wider one would compare unequal to the same text built any other way).

#: (the output, what the context holds of it: cut to 500, tier 3)
KIND_CASES = {
    "astral-cut-to-ascii": ("x" * 600 + "😀" * 5, "x" * 500),
    "astral-cut-to-latin1": ("é" * 600 + "😀" * 5, "é" * 500),
    "astral-cut-to-bmp": ("漢" * 600 + "😀" * 5, "漢" * 500),
    "bmp-cut-to-ascii": ("y" * 700 + "漢", "y" * 500),
    "bmp-cut-to-latin1": ("ÿ" * 700 + "漢", "ÿ" * 500),
    "latin1-cut-to-ascii": ("z" * 700 + "é", "z" * 500),
}


def _kind(text: str) -> int:
    """Bytes per code point of the narrowest `str` kind that holds `text`."""
    widest = max(map(ord, text), default=0)
    return 1 if widest < 0x100 else 2 if widest < 0x10000 else 4


@pytest.mark.parametrize("case", list(KIND_CASES))
def test_context_is_a_str_of_the_narrowest_kind(fork, case):
    output, kept = KIND_CASES[case]
    config = ForkConfig(tier1_count=0, tier2_count=0)
    msgs = [assistant("msg_1", tool("read", {}, output=output))]
    ctx = fork(msgs, config)
    cut = f"\n...[truncated {len(output) - 500} chars]..."
    expected = framed(block("Agent", "[Tool: read] {}", "[Tool result]\n" + kept + cut))
    assert ctx.context == expected
    # the same kind and size as the expected text: the narrowest one
    assert sys.getsizeof(ctx.context) == sys.getsizeof(expected)
    assert _kind(ctx.context) == _kind(kept)
    assert ctx.context.isascii() == kept.isascii()


def test_context_of_many_widths_in_one_session(fork):
    outputs = ["a" * 50, "é" * 50, "漢" * 50, "😀" * 50, "e\u0301" * 25, "ÿ漢😀x" * 12]
    msgs = [user("msg_u", text("go"))]
    msgs += [assistant(f"msg_{i}", tool("read", {}, output=o)) for i, o in enumerate(outputs)]
    msgs.append(user("msg_z", text("naïve 🚀 end")))
    ctx = fork(msgs)
    lines = [block("User", "go")]
    lines += [block("Agent", "[Tool: read] {}", "[Tool result]\n" + o) for o in outputs]
    lines.append(block("User", "naïve 🚀 end"))
    expected = framed(*lines)
    assert ctx.context == expected
    assert sys.getsizeof(ctx.context) == sys.getsizeof(expected)
    assert ctx.stats.total_chars == len(expected)


# --- non-ASCII results searched in their own width ----------------------------------------------
# From dicts, a str that is not ASCII is searched in CPython's own layout (one, two or four bytes
# per character), never converted to UTF-8: these pin the marker and error searches there.

#: one character of each width: Latin-1, the BMP, the astral planes
WIDE = {"latin1": "ü", "bmp": "漢", "astral": "😀"}


@pytest.mark.parametrize("width", list(WIDE))
@pytest.mark.parametrize("where", ["head", "middle", "tail"])
def test_error_word_in_a_wide_result_keeps_its_tail(fork, width, where):
    body = filler(900).replace("0", WIDE[width])
    at = {"head": 0, "middle": 450, "tail": 890}[where]
    out = body[:at] + "failed" + body[at + 6 :]
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    assert result_lines(ctx.context) == [head_tail(out, 500)]
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (1, 1)


@pytest.mark.parametrize("width", list(WIDE))
def test_wide_result_without_error_word_is_cut_head_only(fork, width):
    out = filler(900).replace("0", WIDE[width])
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    assert result_lines(ctx.context) == [head_only(out, 500)]
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (1, 0)


@pytest.mark.parametrize("width", list(WIDE))
def test_cleared_marker_inside_a_wide_result_counts_as_compacted(fork, width):
    out = WIDE[width] * 10 + CLEARED + WIDE[width] * 10
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))])
    assert result_lines(ctx.context) == [out]
    assert ctx.stats.compacted_results == 1
    assert ctx.stats.tier_distribution.tier1 == 0


@pytest.mark.parametrize(
    ("pattern", "output", "found"),
    [
        # "é" as two bytes per character is E9 00; here those bytes straddle two characters
        # (U+E941 then U+4E00: 41 E9 00 4E), which is no match
        ("é", "\ue941\u4e00" * 300, False),
        ("é", "\ue941\u4e00" * 150 + "é" + "\u4e00" * 299, True),
        # a character wider than the text's own can never be in it
        ("😀", "ü" * 600, False),
        ("漢字", "x" * 300 + "漢字" + "😀" * 298, True),
        ("ü", "ü" * 600, True),
    ],
    ids=["straddling-bytes", "bmp-pattern", "too-wide", "bmp-in-astral", "latin1"],
)
def test_non_ascii_error_patterns_match_whole_characters(fork, pattern, output, found):
    config = ForkConfig(tier1_count=0, tier2_count=0, error_patterns=(pattern,))
    ctx = fork([assistant("msg_1", tool("read", {}, output=output))], config)
    want = head_tail(output, 500) if found else head_only(output, 500)
    assert result_lines(ctx.context) == [want]
    assert ctx.stats.head_tail_applied == int(found)


@pytest.mark.parametrize("width", list(WIDE))
def test_non_ascii_cleared_marker_in_a_wide_result(fork, width):
    marker = "[déjà effacé]"
    out = WIDE[width] * 5 + marker
    config = ForkConfig(cleared_marker=marker)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    # a Latin-1 marker is found in every width; the text is passed through
    assert result_lines(ctx.context) == [out]
    assert ctx.stats.compacted_results == 1


#: wide strings are searched 32 Ki characters at a time: needles across the seams
SEAM = 32 * 1024


@pytest.mark.parametrize("offset", [SEAM - len(CLEARED), SEAM - 20, SEAM - 1, SEAM, SEAM + 1])
def test_cleared_marker_anywhere_in_a_long_wide_result(fork, offset):
    out = "😀" * offset + CLEARED + "😀" * 50
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))])
    assert result_lines(ctx.context) == [out]
    assert ctx.stats.compacted_results == 1


@pytest.mark.parametrize("offset", [SEAM - 6, SEAM - 3, SEAM - 1, SEAM, 2 * SEAM - 2])
def test_error_word_anywhere_in_a_long_wide_result(fork, offset):
    out = "漢" * offset + "failed" + "漢" * 600
    config = ForkConfig(tier1_count=0, tier2_count=0)
    ctx = fork([assistant("msg_1", tool("read", {}, output=out))], config)
    assert result_lines(ctx.context) == [head_tail(out, 500)]
    assert ctx.stats.head_tail_applied == 1


def test_a_str_whose_utf8_form_is_cached_renders_the_same(engine):
    """CPython caches a str's UTF-8 form once asked for it (PyUnicode_AsUTF8): such a str is
    read through that form instead of its own layout, with the same result."""
    import ctypes

    from asyncagents import build_fork_context

    as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8
    as_utf8.argtypes = [ctypes.py_object]
    as_utf8.restype = ctypes.c_char_p
    config = ForkConfig(tier1_count=0, tier2_count=0)
    outs = [filler(900).replace("0", unit) + "failed" for unit in WIDE.values()]
    plain = [assistant(f"msg_{i}", tool("read", {}, output=o)) for i, o in enumerate(outs)]
    cached_outs = ["".join(list(o)) for o in outs]  # equal, distinct objects
    for o in cached_outs:
        as_utf8(o)
    cached = [assistant(f"msg_{i}", tool("read", {}, output=o)) for i, o in enumerate(cached_outs)]
    want = build_fork_context(plain, config, engine=engine)
    got = build_fork_context(cached, config, engine=engine)
    assert got == want
    assert result_lines(got.context) == [head_tail(o, 500) for o in outs]


# --- legacy calls: a state without a status ------------------------------------------------------


def test_legacy_call_with_input_takes_the_tier_of_the_next_tool_result(fork):
    params = {"pattern": filler(700)}
    as_json = '{"pattern":"' + filler(700) + '"}'
    older, newer = filler(600, 1), filler(3_500, 2)
    config = ForkConfig(tier1_count=0, tier2_count=1)  # newest result tier 2, the rest tier 3
    msgs = [
        assistant(
            "msg_1",
            tool("grep", state={"input": params}),
            tool_result(older),  # index 1: tier 3, name from the grep call
            tool("read", state={"input": params, "status": None, "title": "r"}),
            tool_result(""),  # no result: skipped when looking for the next one
            tool_result(newer),  # index 0: tier 2
            tool("bash", state={"input": params}),  # no tool_result after it: 500
        )
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: grep] " + as_json[:100] + "...",
            "[Tool result]\n" + head_only(older, 500),
            "[Tool: read] " + as_json[:200] + "...",
            "[Tool result]\n" + head_only(newer, 3_000),
            "[Tool: bash] " + as_json[:500] + "...",
        )
    )
    s = ctx.stats
    assert (s.tier_distribution.tier2, s.tier_distribution.tier3) == (1, 1)
    assert (s.truncated_results, s.head_tail_applied) == (2, 0)


def test_legacy_call_tier_follows_the_numbering_across_messages(fork):
    params = {"command": "y" * 300}
    as_json = '{"command":"' + "y" * 300 + '"}'
    config = ForkConfig(tier1_count=1, tier2_count=1)
    msgs = [
        assistant("msg_1", tool("bash", state={"input": params}), tool_result("a")),  # tier 3
        assistant("msg_2", tool("bash", state={"input": params}), tool_result("b")),  # tier 2
        assistant("msg_3", tool("bash", state={"input": params}), tool_result("c")),  # tier 1
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block("Agent", "[Tool: bash] " + as_json[:100] + "...", "[Tool result]\na"),
        block("Agent", "[Tool: bash] " + as_json[:200] + "...", "[Tool result]\nb"),
        block("Agent", "[Tool: bash] " + as_json, "[Tool result]\nc"),
    )


def test_call_with_a_status_keeps_its_own_tier(fork):
    params = {"command": "z" * 300}
    as_json = '{"command":"' + "z" * 300 + '"}'
    config = ForkConfig(tier1_count=0, tier2_count=1)
    msgs = [
        assistant(
            "msg_1",
            tool("bash", params, status="running"),  # a status: not legacy, no result, 500
            tool_result("older"),  # index 1, tier 3
            tool_result("newer"),  # index 0, tier 2
        )
    ]
    ctx = fork(msgs, config)
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: bash] " + as_json,
            "[Tool result]\nolder",
            "[Tool result]\nnewer",
        )
    )
