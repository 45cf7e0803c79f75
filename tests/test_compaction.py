"""Stage 1: compaction boundaries (DECISIONS.md "Stage 1" and the seed's three scenarios)."""

from __future__ import annotations

import pytest
from asyncagents import ForkConfig
from fork_builders import assistant, block, compaction, framed, text, tool, user


def summary(mid: str, parent: str | None, body: str = "SUMMARY") -> dict:
    return assistant(mid, text(body), parent=parent, summary=True)


def simple_session() -> list[dict]:
    return [
        user("msg_00", text("old question")),
        assistant("msg_01", text("old answer"), parent="msg_00"),
        user("msg_02", compaction()),
        summary("msg_03", parent="msg_02"),
        user("msg_04", text("new question")),
        assistant("msg_05", text("new answer"), parent="msg_04"),
    ]


def test_compaction_boundary_detection(fork):
    """Seed: keep the summary and everything after it; drop everything before."""
    ctx = fork(simple_session())
    assert ctx.context == framed(
        block("Agent", "SUMMARY"), block("User", "new question"), block("Agent", "new answer")
    )
    s = ctx.stats
    assert (s.compaction_detected, s.compaction_slice_index, s.compaction_tail_messages) == (
        True,
        3,
        0,
    )
    assert (s.original_count, s.final_count, s.removed_messages) == (6, 3, 0)


def test_no_compaction_boundary(fork):
    """Seed: without a boundary every message goes on."""
    msgs = [user("msg_00", text("q")), assistant("msg_01", text("a"), parent="msg_00")]
    ctx = fork(msgs)
    assert ctx.context == framed(block("User", "q"), block("Agent", "a"))
    assert (ctx.stats.compaction_detected, ctx.stats.compaction_slice_index) == (False, -1)
    assert ctx.stats.compaction_tail_messages == 0


def test_multiple_boundaries_latest_wins(fork):
    """Seed: only the latest boundary counts; earlier summaries are dropped."""
    msgs = [
        user("msg_00", text("q1")),
        user("msg_01", compaction()),
        summary("msg_02", parent="msg_01", body="FIRST SUMMARY"),
        user("msg_03", text("q2")),
        user("msg_04", compaction()),
        summary("msg_05", parent="msg_04", body="SECOND SUMMARY"),
        user("msg_06", text("q3")),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "SECOND SUMMARY"), block("User", "q3"))
    assert ctx.stats.compaction_slice_index == 5
    assert "FIRST" not in ctx.text


def test_later_marker_without_summary_is_ignored(fork):
    msgs = [
        user("msg_00", text("q1")),
        user("msg_01", compaction()),
        summary("msg_02", parent="msg_01"),
        user("msg_03", text("q2")),
        user("msg_04", compaction()),  # compaction started, no summary yet
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "SUMMARY"), block("User", "q2"), block("User"))
    assert ctx.stats.compaction_slice_index == 2


def test_marker_without_any_summary_slices_nothing(fork):
    msgs = [user("msg_00", text("q")), user("msg_01", compaction()), assistant("msg_02", text("a"))]
    ctx = fork(msgs)
    assert ctx.context == framed(block("User", "q"), block("User"), block("Agent", "a"))
    assert (ctx.stats.compaction_detected, ctx.stats.compaction_slice_index) == (False, -1)
    assert ctx.text.splitlines()[2] == "- No compaction detected"


def test_summary_found_by_parent_id_not_position(fork):
    msgs = [
        user("msg_00", text("q")),
        user("msg_01", compaction()),
        summary("msg_02", parent="msg_zz", body="WRONG SUMMARY"),
        assistant("msg_03", text("between"), parent="msg_00"),
        summary("msg_04", parent="msg_01", body="RIGHT SUMMARY"),
        user("msg_05", text("after")),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "RIGHT SUMMARY"), block("User", "after"))
    assert ctx.stats.compaction_slice_index == 4


def test_first_summary_with_matching_parent_id_wins(fork):
    msgs = [
        user("msg_00", compaction()),
        summary("msg_01", parent="msg_00", body="S1"),
        summary("msg_02", parent="msg_00", body="S2"),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "S1"), block("Agent", "S2"))
    assert ctx.stats.compaction_slice_index == 1


def test_fallback_first_summary_after_the_marker(fork):
    msgs = [
        summary("msg_00", parent=None, body="BEFORE MARKER"),
        user("msg_01", text("q")),
        user("msg_02", compaction()),
        assistant("msg_03", text("not a summary"), parent="msg_01"),
        summary("msg_04", parent=None, body="FALLBACK"),
        summary("msg_05", parent="msg_nope", body="LATER"),
        user("msg_06", text("q2")),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("Agent", "FALLBACK"), block("Agent", "LATER"), block("User", "q2")
    )
    assert ctx.stats.compaction_slice_index == 4


def test_marker_must_be_in_a_user_message(fork):
    msgs = [
        user("msg_00", text("q")),
        assistant("msg_01", compaction(), parent="msg_00"),
        summary("msg_02", parent="msg_01"),
    ]
    ctx = fork(msgs)
    assert ctx.stats.compaction_detected is False
    assert ctx.context == framed(block("User", "q"), block("Agent"), block("Agent", "SUMMARY"))


def test_summary_must_be_assistant_and_json_true(fork):
    msgs = [
        user("msg_00", text("q")),
        user("msg_01", compaction()),
        user("msg_02", text("user summary object"), summary={"diffs": []}),
        user("msg_03", text("user summary true"), summary=True, parentID="msg_01"),
        assistant("msg_04", text("string"), parent="msg_01", summary="true"),
        assistant("msg_05", text("one"), parent="msg_01", summary=1),
        assistant("msg_06", text("false"), parent="msg_01", summary=False),
    ]
    ctx = fork(msgs)
    assert ctx.stats.compaction_detected is False
    assert ctx.stats.final_count == 7


def test_tail_start_id_keeps_the_verbatim_tail(fork):
    """OpenCode's model sees summary, then the tail (tail_start_id up to the marker), then after."""
    msgs = [
        user("msg_00", text("q1")),
        assistant("msg_01", text("a1"), parent="msg_00"),
        user("msg_02", text("q2")),
        assistant("msg_03", text("a2"), parent="msg_02"),
        user("msg_04", compaction("msg_02")),
        summary("msg_05", parent="msg_04"),
        user("msg_06", text("q3")),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("Agent", "SUMMARY"),
        block("User", "q2"),
        block("Agent", "a2"),
        block("User", "q3"),
    )
    s = ctx.stats
    assert (s.compaction_slice_index, s.compaction_tail_messages, s.final_count) == (5, 2, 4)
    assert s.original_count == 7


def test_tail_start_id_not_before_the_marker_is_ignored(fork):
    base = [
        user("msg_00", text("q1")),
        None,
        summary("msg_02", parent="msg_01"),
        user("msg_03", text("q2")),
    ]
    for tail_id in ("msg_03", "msg_02", "msg_01", "msg_missing"):
        msgs = list(base)
        msgs[1] = user("msg_01", compaction(tail_id))
        ctx = fork(msgs)
        assert ctx.context == framed(block("Agent", "SUMMARY"), block("User", "q2")), tail_id
        assert ctx.stats.compaction_tail_messages == 0


def test_tail_can_start_in_the_middle_of_a_turn(fork):
    msgs = [
        user("msg_00", text("q1")),
        assistant("msg_01", tool("bash", {"command": "a"}, output="A"), parent="msg_00"),
        assistant("msg_02", tool("bash", {"command": "b"}, output="B"), parent="msg_00"),
        assistant("msg_03", text("done"), parent="msg_00"),
        user("msg_04", compaction("msg_02", auto=True)),
        summary("msg_05", parent="msg_04"),
        user("msg_06", text("Continue if you have next steps", synthetic=True)),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("Agent", "SUMMARY"),
        block("Agent", '[Tool: bash] {"command":"b"}', "[Tool result]\nB"),
        block("Agent", "done"),
        block("User", "Continue if you have next steps"),
    )
    assert ctx.stats.compaction_tail_messages == 2
    assert ctx.stats.tier_distribution.tier1 == 1


def test_first_compaction_part_of_a_message_decides_the_tail(fork):
    msgs = [
        user("msg_00", text("q1")),
        user("msg_01", text("q2")),
        user("msg_02", compaction("msg_01"), compaction("msg_00")),
        summary("msg_03", parent="msg_02"),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("Agent", "SUMMARY"), block("User", "q2"))
    assert ctx.stats.compaction_tail_messages == 1


def test_first_message_with_the_tail_id_is_the_start(fork):
    msgs = [
        user("msg_00", text("q0")),
        user("msg_dup", text("first dup")),
        user("msg_02", text("q2")),
        user("msg_dup", text("second dup")),
        user("msg_04", compaction("msg_dup")),
        summary("msg_05", parent="msg_04"),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("Agent", "SUMMARY"),
        block("User", "first dup"),
        block("User", "q2"),
        block("User", "second dup"),
    )
    assert ctx.stats.compaction_tail_messages == 3


def test_summary_before_its_marker_is_kept_literally(fork):
    # the parentID match wins even when the summary sits before the marker: kept is
    # [summary, tail..., everything after the summary], built literally from the rules
    msgs = [
        user("msg_00", text("q0")),
        summary("msg_01", parent="msg_03", body="EARLY"),
        user("msg_02", text("q2")),
        user("msg_03", compaction("msg_00")),
        user("msg_04", text("q4")),
    ]
    ctx = fork(msgs)
    assert ctx.stats.compaction_slice_index == 1
    assert ctx.context == framed(
        block("Agent", "EARLY"),
        block("User", "q0"),
        block("Agent", "EARLY"),
        block("User", "q2"),
        block("User", "q2"),
        block("User"),
        block("User", "q4"),
    )
    assert ctx.stats.compaction_tail_messages == 3
    assert ctx.stats.final_count == 7


def test_tool_results_are_numbered_over_kept_messages_only(fork):
    big = "z" * 4000
    msgs = [user("msg_00", text("q"))]
    msgs += [assistant(f"msg_0{i + 1}", tool("read", {}, output=big)) for i in range(8)]
    msgs += [
        user("msg_10", compaction("msg_08")),
        summary("msg_11", parent="msg_10"),
        assistant("msg_12", tool("read", {}, output="new")),
    ]
    ctx = fork(msgs, ForkConfig(tier1_count=1, tier2_count=1, tier2_limit=10, tier3_limit=5))
    # kept: summary, msg_08 (tail), msg_12
    assert ctx.context == framed(
        block("Agent", "SUMMARY"),
        block(
            "Agent",
            "[Tool: read] {}",
            "[Tool result]\n" + "z" * 10 + "\n...[truncated 3990 chars]...",
        ),
        block("Agent", "[Tool: read] {}", "[Tool result]\nnew"),
    )
    td = ctx.stats.tier_distribution
    assert (td.tier1, td.tier2, td.tier3, ctx.stats.truncated_results) == (1, 1, 0, 1)
    assert (ctx.stats.original_count, ctx.stats.final_count) == (12, 3)


def test_compaction_line_in_the_preamble(fork):
    ctx = fork(simple_session())
    assert ctx.preamble.splitlines()[2] == (
        "- Compaction summary included (messages before compaction removed)"
    )


def _bodies_read_first(messages: list[dict], engine: str = "python") -> list[int]:
    """Indexes of the messages whose bodies an engine reads in its first pass (the Rust walk of
    Python objects reads them from `bodies_from` on)."""
    from asyncagents import _core
    from asyncagents.reference.session import read_session

    if engine == "rust":
        return list(range(_core.from_objects(messages).bodies_from, len(messages)))
    return sorted(read_session(messages).records)


def test_each_engine_reads_each_kept_body_once_and_no_dropped_one(engine):
    """Both read bodies down to the boundary stage 1 slices at and through its tail (the
    reference never twice: `read_bodies` has nothing left), and only heads before that."""

    def history(n: int) -> list[dict]:
        return [user(f"msg_h{i}", text(f"old {i}")) for i in range(n)]

    def read(messages: list[dict]) -> list[int]:
        return _bodies_read_first(messages, engine)

    tail = history(4)
    session = [
        *tail,
        user("msg_10", compaction("msg_h2")),
        summary("msg_11", parent="msg_10"),
        user("msg_12", text("new")),
    ]
    # the tail (2, 3), the marker, the summary and after; not 0 and 1
    assert read(session) == [2, 3, 4, 5, 6]
    # a trailing marker without summary is not the boundary: the one before it is
    assert read([*session, user("msg_13", compaction("msg_h0"))]) == [2, 3, 4, 5, 6, 7]
    # no tail (no tail_start_id, or one that is not before the marker): heads from the marker
    for tail_start in (None, "msg_12", "msg_10"):
        changed = [*tail, user("msg_10", compaction(tail_start)), *session[5:]]
        assert read(changed) == [4, 5, 6]
    # an unknown tail_start_id: stage 1 keeps no tail, the first pass reads every body
    unknown = [*tail, user("msg_10", compaction("msg_gone")), *session[5:]]
    assert read(unknown) == [0, 1, 2, 3, 4, 5, 6]
    # no summary at all: every body, in one pass
    assert read(session[:5] + session[6:]) == [0, 1, 2, 3, 4, 5]


def test_a_kept_message_older_than_the_bodies_read_is_read_by_a_second_walk():
    """A summary before its marker (found by parentID) makes stage 1 keep messages older than
    the boundary the walk read bodies down to: the Rust walk's render refuses them, and
    `build_fork_context` walks again with every body, as the reference reads them later."""
    from asyncagents import _core, build_fork_context

    doc = [
        user("msg_h0", text("old")),
        summary("msg_s1", parent="msg_m2", body="EARLY SUMMARY"),
        user("msg_h2", text("kept, before the boundary the walk met")),
        user("msg_m1", compaction()),
        summary("msg_s2", parent="msg_m1"),
        user("msg_m2", compaction()),
        user("msg_after", text("after")),
    ]
    session = _core.from_objects(doc)
    assert session.bodies_from == 3  # the newest marker with a summary after it
    with pytest.raises(ValueError, match="the body of message 1 was not read"):
        session.render([1, 2, 3, 4, 5, 6], ForkConfig())
    assert _core.from_objects(doc, every_body=True).bodies_from == 0
    rust = build_fork_context(doc)
    assert rust == build_fork_context(doc, engine="python")
    assert rust.stats.compaction_slice_index == 1
    assert "kept, before the boundary the walk met" in rust.context


def test_both_engines_read_every_kept_body_of_the_generated_shapes_in_one_pass():
    import sys
    from pathlib import Path

    from asyncagents import _core
    from asyncagents.compaction import slice_at_compaction
    from asyncagents.reference.session import read_session

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))
    from generate import SHAPES, session_objects

    for size in (10, 200):
        for shape in SHAPES:
            messages = session_objects(size, shape)
            session = read_session(messages)
            kept = set(slice_at_compaction(session.view).kept)
            assert kept <= session.records.keys(), (shape, size)
            # read but dropped: at most the marker of the boundary
            assert len(session.records.keys() - kept) <= 1, (shape, size)
            # the Rust walk reads the same bodies
            walked = _core.from_objects(messages).bodies_from
            assert set(range(walked, size)) == session.records.keys(), (shape, size)
