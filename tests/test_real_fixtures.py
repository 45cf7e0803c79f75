"""Recordings of a real `opencode serve` 1.18.33 (copied from shared/fixtures/opencode).

Every fact asserted here was read off the JSON by hand (message indexes, output lengths, which
parts carry ``state.time.compacted``), see tests/fixtures and shared/fixtures/opencode/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asyncagents import ForkConfig, build_fork_context
from asyncagents.models import Message
from fork_builders import CLEARED, block, framed

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_bytes())


def raw(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def texts(msg: dict) -> list[str]:
    return [p["text"] for p in msg["parts"] if p["type"] == "text"]


BASH_HELLO = '[Tool: bash] {"command":"echo hello from fixture && date -u +%Y"}'


# --- main session after /summarize (45 messages) -------------------------------------------------


def test_main_after_compaction_slices_at_the_summary_with_its_tail(engine):
    msgs = load("messages_main_after_compaction.json")
    assert msgs[34]["parts"][0]["tail_start_id"] == msgs[27]["info"]["id"]
    assert msgs[35]["info"]["summary"] is True
    ctx = build_fork_context(raw("messages_main_after_compaction.json"), engine=engine)
    s = ctx.stats
    # kept: summary (35), tail 27..33 (7 messages), then 36..44 (9 messages)
    assert (s.original_count, s.final_count, s.removed_messages) == (45, 17, 0)
    assert (s.compaction_detected, s.compaction_slice_index, s.compaction_tail_messages) == (
        True,
        35,
        7,
    )
    # 11 results: newest five (bash 76, bash 10118, read 281, bash 1427, glob 31) are tier 1;
    # grep 227, bash 311, read 4104, bash 6456 and the two bash 24 are tier 2
    td = s.tier_distribution
    assert (td.tier1, td.tier2, td.tier3) == (5, 6, 0)
    assert (s.truncated_results, s.head_tail_applied, s.compacted_results) == (2, 1, 0)
    assert s.total_chars == len(ctx.context)
    assert s.hard_capped is False


def test_main_after_compaction_context_content(engine):
    msgs = load("messages_main_after_compaction.json")
    ctx = build_fork_context(msgs, engine=engine)
    summary_text = texts(msgs[35])[0]
    assert summary_text.startswith("## Goal\nRecord OpenCode fixtures")
    assert ctx.context.startswith(
        framed(block("Agent", summary_text), block("Agent", *texts(msgs[27]))).removesuffix(
            "\n</inherited_context>"
        )
        + "\nUser:\n"
    )
    assert ctx.context.endswith(block("Agent", *texts(msgs[44])) + "\n</inherited_context>")

    # read of records.csv (4104 chars, tier 2, no error pattern): head only
    read_out = msgs[37]["parts"][2]["state"]["output"]
    assert len(read_out) == 4104
    assert (
        '[Tool: read] {"filePath":"/home/dev/proj/data/records.csv","limit":120}\n[Tool result]\n'
        + read_out[:3000]
        + "\n...[truncated 1104 chars]...\n"
    ) in ctx.context
    # bash seq 1 1500 (6456 chars, tier 2): head 2400 + tail 600
    seq_out = msgs[37]["parts"][1]["state"]["output"]
    assert len(seq_out) == 6456
    assert (
        '[Tool: bash] {"command":"seq 1 1500 | paste -sd\' \' | fold -w 100"}\n[Tool result]\n'
        + seq_out[:2400]
        + "\n...[truncated 3456 chars]...\n"
        + seq_out[-600:]
    ) in ctx.context
    # seq 1 3000 (10118 chars) is tier 1: whole
    big = msgs[42]["parts"][1]["state"]["output"]
    assert len(big) == 10118
    assert '[Tool: bash] {"command":"seq 1 3000"}\n[Tool result]\n' + big + "\n" in ctx.context
    assert ctx.context.count(BASH_HELLO + "\n[Tool result]\nhello from fixture\n2026\n") == 2
    # head messages are gone: their failures and the old prompts do not leak
    assert "ripgrep execution failed" not in ctx.context
    assert "File not found" not in ctx.context
    assert texts(msgs[0])[0] not in ctx.context
    assert CLEARED not in ctx.context
    assert ctx.preamble.splitlines()[2:5] == [
        "- Compaction summary included (messages before compaction removed)",
        "- Tool results: 5 full, 6 truncated to 3000 chars, 0 truncated to 500 chars",
        "- All messages preserved",
    ]


# --- main session before /summarize (34 messages, 13 pruned parts) -------------------------------


def test_main_before_compaction_counts_pruned_parts(engine):
    msgs = load("messages_main_before_compaction.json")
    pruned = [
        p
        for m in msgs
        for p in m["parts"]
        if p["type"] == "tool" and p["state"].get("time", {}).get("compacted")
    ]
    assert len(pruned) == 13
    ctx = build_fork_context(raw("messages_main_before_compaction.json"), engine=engine)
    s = ctx.stats
    assert (s.original_count, s.final_count, s.removed_messages) == (34, 34, 0)
    assert (s.compaction_detected, s.compaction_slice_index) == (False, -1)
    # 21 results: 13 cleared; of the 8 others, 5 newest in tier 1, read error and glob error
    # at indexes 11 and 14 in tier 2, grep error at index 15 in tier 3; none is long
    td = s.tier_distribution
    assert (td.tier1, td.tier2, td.tier3) == (5, 2, 1)
    assert (s.compacted_results, s.truncated_results, s.head_tail_applied) == (13, 0, 0)
    assert ctx.context.count("[Tool result]\n" + CLEARED) == 13
    # pruned parts keep their output in storage; it must not reach the context
    assert pruned[0]["state"]["output"][:200] not in ctx.context
    assert 120_000 < s.total_chars <= 200_000
    assert ctx.preamble.splitlines()[2:6] == [
        "- No compaction detected",
        "- Tool results: 5 full, 2 truncated to 3000 chars, 1 truncated to 500 chars",
        "- 13 tool results were already cleared by compaction",
        "- All messages preserved",
    ]


def test_main_before_compaction_error_and_reasoning_parts(engine):
    msgs = load("messages_main_before_compaction.json")
    ctx = build_fork_context(msgs, engine=engine)
    assert ctx.context.count("[Tool result]\nripgrep execution failed") == 2
    assert "[Tool result]\nFile not found: /home/dev/proj/does/not/exist.txt" in ctx.context
    thought = next(p["text"] for p in msgs[22]["parts"] if p["type"] == "reasoning")
    assert thought not in ctx.context
    # the three unpruned 45k bash outputs are tier 1 and whole
    for m, p in ((25, 2), (26, 1), (26, 2)):
        out = msgs[m]["parts"][p]["state"]["output"]
        assert len(out) > 40_000
        assert "[Tool result]\n" + out + "\n" in ctx.context


def test_main_before_compaction_with_a_small_budget(engine):
    config = ForkConfig(char_budget=50_000, char_no_removal=0)
    ctx = build_fork_context(raw("messages_main_before_compaction.json"), config, engine=engine)
    other = build_fork_context(
        raw("messages_main_before_compaction.json"),
        config,
        engine="python" if engine == "rust" else "rust",
    )
    assert ctx == other
    s = ctx.stats
    assert s.removed_messages > 0 and s.final_count == 34 - s.removed_messages
    assert s.total_chars == len(ctx.context) <= 50_000
    msgs = load("messages_main_before_compaction.json")
    assert ctx.context.endswith(block("Agent", *texts(msgs[33])) + "\n</inherited_context>")


# --- fork at the first post-compaction message (36 messages) -------------------------------------


def test_fork_at_message_exact_context(engine):
    msgs = load("fork_messages_at_message.json")
    ctx = build_fork_context(raw("fork_messages_at_message.json"), engine=engine)
    hello = "[Tool result]\nhello from fixture\n2026\n"
    assert ctx.context == framed(
        block("Agent", *texts(msgs[35])),
        block("Agent", *texts(msgs[27])),
        block("User", *texts(msgs[28])),
        block("Agent", BASH_HELLO, hello),
        block("Agent", *texts(msgs[30])),
        block("User", *texts(msgs[31])),
        block("Agent", BASH_HELLO, hello),
        block("Agent", *texts(msgs[33])),
    )
    s = ctx.stats
    assert (s.original_count, s.final_count, s.compaction_slice_index) == (36, 8, 35)
    assert s.compaction_tail_messages == 7
    td = s.tier_distribution
    assert (td.tier1, td.tier2, td.tier3) == (2, 0, 0)


# --- aborted turn, running tool, child session, provider error -----------------------------------


def test_abort_after_abort_exact_context(engine):
    msgs = load("abort_messages_after_abort.json")
    ctx = build_fork_context(raw("abort_messages_after_abort.json"), engine=engine)
    assert ctx.context == framed(
        block("User", "[scenario:slow] Sleep for a while, please."),
        block(
            "Agent",
            '[Tool: bash] {"command":"sleep 45 && echo finished"}',
            "[Tool result]\n(no output)\n\n<shell_metadata>\nUser aborted the command\n"
            "</shell_metadata>",
            "[Error: MessageAbortedError] Aborted",
        ),
    )
    assert msgs[1]["info"]["error"]["name"] == "MessageAbortedError"


def test_abort_while_tool_running(engine):
    msgs = load("abort_messages_while_tool_running.json")
    ctx = build_fork_context(msgs, engine=engine)
    call = next(p for p in msgs[1]["parts"] if p["type"] == "tool")
    assert call["state"]["status"] == "running"
    line = "[Tool: bash] " + json.dumps(
        call["state"]["input"], ensure_ascii=False, separators=(",", ":")
    )
    assert ctx.context == framed(block("User", *texts(msgs[0])), block("Agent", line))
    assert ctx.stats.tier_distribution.tier1 == 0


def test_child_session_exact_context(engine):
    ctx = build_fork_context(raw("child_messages.json"), engine=engine)
    assert ctx.context == framed(
        block("User", "[scenario:small] Say hello from the child session."),
        block("Agent", BASH_HELLO, "[Tool result]\nhello from fixture\n2026\n"),
        block(
            "Agent",
            "Done with scenario `small`: ran 1 step(s) of tool calls. Everything requested has "
            "been executed; see the tool outputs above for details.",
        ),
    )
    assert ctx.preamble == (
        "You are working with forked context from a parent agent session.\n"
        "Context processing applied:\n"
        "- No compaction detected\n"
        "- Tool results: 1 full, 0 truncated to 3000 chars, 0 truncated to 500 chars\n"
        "- All messages preserved\n"
        "If you need complete file contents or detailed results, re-read the files directly."
    )


def test_provider_error_message(engine):
    response = json.loads(raw("prompt_provider_error_response.json"))["response"]
    ctx = build_fork_context([response], engine=engine)
    assert ctx.context == framed(
        block("Agent", "[Error: APIError] Invalid request: fixture provider rejects this prompt")
    )


# --- both engines, every input form --------------------------------------------------------------

ALL = [
    "messages_main_after_compaction.json",
    "messages_main_before_compaction.json",
    "fork_messages_at_message.json",
    "abort_messages_after_abort.json",
    "abort_messages_while_tool_running.json",
    "child_messages.json",
]


@pytest.mark.parametrize("name", ALL)
def test_engines_and_input_forms_agree(name):
    data = raw(name)
    msgs = json.loads(data)
    reference = build_fork_context(msgs, engine="python")
    assert reference.context
    for engine in ("rust", "python"):
        for form in (data, data.decode(), msgs, {"info": {"id": "ses_x"}, "messages": msgs}):
            assert build_fork_context(form, engine=engine) == reference, (engine, type(form))
        models = [Message.model_validate(m) for m in msgs]
        assert build_fork_context(models, engine=engine) == reference, (engine, "models")


@pytest.mark.parametrize("name", ALL)
def test_engines_agree_with_small_budgets(name):
    data = raw(name)
    for budget in (0, 300, 1_000, 5_000, 20_000):
        config = ForkConfig(char_budget=budget, char_no_removal=budget // 2, tier1_count=2)
        a = build_fork_context(data, config, engine="rust")
        b = build_fork_context(data, config, engine="python")
        assert a == b, budget
        if budget >= 1_000:
            assert a.stats.total_chars <= budget
