"""One test per fork-pipeline scenario of the seed documents (000 wins over 001/003), named after
the scenario. The detailed rules behind each are tested in the stage files."""

from __future__ import annotations

from fork_builders import assistant, block, compaction, framed, text, tool, user


def summary(mid: str, parent: str, body: str) -> dict:
    return assistant(mid, text(body), parent=parent, summary=True)


def results_session(n: int, size: int, name: str = "read") -> list[dict]:
    msgs = [user("msg_u", text("go"))]
    msgs += [
        assistant(f"msg_{i:03d}", tool(name, {"n": i}, output=f"{i:03d}" + "w" * (size - 3)))
        for i in range(n)
    ]
    return msgs


# --- 000: Fork Context Inheritance ---------------------------------------------------------------


def test_000_compaction_boundary_detection(fork):
    msgs = [
        user("msg_0", text("before")),
        user("msg_1", compaction()),
        summary("msg_2", "msg_1", "the summary"),
        user("msg_3", text("after")),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "the summary"), block("User", "after"))
    assert ctx.stats.compaction_detected is True


def test_000_multiple_compaction_boundaries(fork):
    msgs = [
        user("msg_0", compaction()),
        summary("msg_1", "msg_0", "old summary"),
        user("msg_2", text("middle")),
        user("msg_3", compaction()),
        summary("msg_4", "msg_3", "new summary"),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "new summary"))
    assert ctx.stats.compaction_slice_index == 4


def test_000_no_compaction_boundary(fork):
    msgs = [user("msg_0", text("a")), assistant("msg_1", text("b"))]
    ctx = fork(msgs)
    assert ctx.context == framed(block("User", "a"), block("Agent", "b"))
    assert (ctx.stats.compaction_detected, ctx.stats.final_count) == (False, 2)


def test_000_graduated_3_tier_tool_truncation(fork):
    ctx = fork(results_session(17, 3_500))
    body = ctx.context.removesuffix("\n</inherited_context>")
    got = [c.partition("[Tool result]\n")[2] for c in body.split("\nAgent:\n")[1:]]
    full = [f"{i:03d}" + "w" * 3_497 for i in range(17)]
    assert got[12:] == full[12:]  # 5 newest: whole
    assert got[2:12] == [f[:3000] + "\n...[truncated 500 chars]..." for f in full[2:12]]
    assert got[0] == full[0][:500] + "\n...[truncated 3000 chars]..."
    assert got[1] == full[1][:500] + "\n...[truncated 3000 chars]..."
    td = ctx.stats.tier_distribution
    assert (td.tier1, td.tier2, td.tier3) == (5, 10, 2)


def test_000_smart_truncation_method_selection(fork):
    out = "h" * 3_000 + "t" * 1_000
    msgs = [
        assistant("msg_0", tool("bash", {}, output=out)),  # terminal tool: head+tail
        assistant("msg_1", tool("read", {}, output=out + "Error")),  # error pattern: head+tail
        assistant("msg_2", tool("read", {}, output=out)),  # neither: head only
    ]
    msgs += [assistant(f"msg_x{i}", tool("read", {}, output="ok")) for i in range(5)]
    ctx = fork(msgs)
    assert (
        block(
            "Agent",
            "[Tool: bash] {}",
            "[Tool result]\n" + "h" * 2_400 + "\n...[truncated 1000 chars]...\n" + "t" * 600,
        )
        in ctx.context
    )
    assert (
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\n"
            + "h" * 2_400
            + "\n...[truncated 1005 chars]...\n"
            + "t" * 595
            + "Error",
        )
        in ctx.context
    )
    assert (
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\n" + "h" * 3_000 + "\n...[truncated 1000 chars]...",
        )
        in ctx.context
    )
    assert (ctx.stats.truncated_results, ctx.stats.head_tail_applied) == (3, 2)


def test_000_tool_parameter_truncation_per_tier(fork):
    params = {"q": "p" * 600}
    as_json = '{"q":"' + "p" * 600 + '"}'
    msgs = [assistant(f"msg_{i:02d}", tool("grep", params, output="r")) for i in range(16)]
    ctx = fork(msgs)
    calls = [c.split("\n")[0] for c in ctx.context.split("\nAgent:\n")[1:]]
    assert calls[0] == "[Tool: grep] " + as_json[:100] + "..."
    assert set(calls[1:11]) == {"[Tool: grep] " + as_json[:200] + "..."}
    assert set(calls[11:]) == {"[Tool: grep] " + as_json[:500] + "..."}


def test_000_already_compacted_tool_results(fork):
    cleared = "[Old tool result content cleared]"
    msgs = [assistant("msg_0", tool("read", {}, output="x" * 5_000 + cleared))]
    msgs += [assistant(f"msg_{i}", tool("read", {}, output="ok")) for i in range(1, 20)]
    ctx = fork(msgs)
    assert "[Tool result]\n" + "x" * 5_000 + cleared + "\n" in ctx.context
    assert ctx.stats.compacted_results == 1


def test_000_character_budget_enforcement(fork):
    small = [user(f"msg_{i}", text(str(i) * 1_000)) for i in range(100)]  # ~100k: all kept
    ctx = fork(small)
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (0, 100)
    big = [user(f"msg_{i}", text(str(i % 10) * 10_000)) for i in range(30)]  # ~300k
    ctx = fork(big)
    # 40 + k * 10_007 <= 200_000  ->  k = 19
    assert (ctx.stats.removed_messages, ctx.stats.final_count) == (11, 19)
    assert ctx.context == framed(*(block("User", str(i % 10) * 10_000) for i in range(11, 30)))


def test_000_dynamic_preamble_content(fork):
    msgs = [
        user("msg_0", compaction()),
        summary("msg_1", "msg_0", "s"),
        *[user(f"msg_{i}", text("y" * 49_900)) for i in range(2, 7)],
    ]
    ctx = fork(msgs)
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- Compaction summary included (messages before compaction removed)\n"
        "- Tool results: 0 full, 0 truncated to 3000 chars, 0 truncated to 500 chars\n"
        "- 2 oldest messages removed to fit 200000 char budget\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )


# --- 001/003: formatting scenarios still in force ------------------------------------------------


def test_001_fork_context_role_label_format(fork):
    ctx = fork([user("msg_0", text("question")), assistant("msg_1", text("answer"))])
    assert (
        ctx.context == "<inherited_context>\nUser:\nquestion\nAgent:\nanswer\n</inherited_context>"
    )


def test_001_fork_context_tool_call_display(fork):
    ctx = fork([assistant("msg_0", tool("glob", {"pattern": "**/*.csv"}, output="a.csv"))])
    assert ctx.context == framed(
        block("Agent", '[Tool: glob] {"pattern":"**/*.csv"}', "[Tool result]\na.csv")
    )


def test_001_fork_with_context_truncation_keeps_the_call_and_the_length(fork):
    # 000 replaced the flat 1500-char limit with tiers; the call line and the count stay
    msgs = [assistant(f"msg_{i:02d}", tool("read", {"i": i}, output="z" * 4_000)) for i in range(6)]
    ctx = fork(msgs)
    assert ctx.context.startswith(
        '<inherited_context>\nAgent:\n[Tool: read] {"i":0}\n[Tool result]\n'
        + "z" * 3_000
        + "\n...[truncated 1000 chars]...\nAgent:\n"
    )


def test_001_fork_with_limit_enforcement_keeps_the_most_recent(fork):
    msgs = [user(f"msg_{i}", text(f"{i:02d}" + "m" * 49_998)) for i in range(6)]
    ctx = fork(msgs)
    assert ctx.stats.removed_messages == 3
    assert ctx.context == framed(*(block("User", f"{i:02d}" + "m" * 49_998) for i in (3, 4, 5)))
