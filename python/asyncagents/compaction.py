"""Stage 1: find the latest complete compaction boundary and decide which messages stay.

Works on a sparse `CompactionView` (only marker and summary messages, plus an id lookup). The
reference engine runs these rules; the Rust engine runs the same rules on its parsed session
(`rust/src/compaction.rs`, called by `ParsedSession.fork`), so a call builds no Python view and
no list of kept indexes. The equivalence tests compare the two engines' answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple


class MessageMeta(NamedTuple):
    """What stage 1 needs of one message (the reference keeps one per record)."""

    role: str | None
    id: str | None
    parent_id: str | None
    #: ``info.summary`` is JSON ``true`` (a compaction summary; on user messages it is an object)
    summary: bool
    #: one entry per ``compaction`` part of a user message: its ``tail_start_id`` or None
    markers: list[str | None]


class CompactionView(NamedTuple):
    """The messages stage 1 looks at, out of `message_count`."""

    message_count: int
    #: ``(index, info.id, [tail_start_id per compaction part])`` of user messages with markers
    markers: list[tuple[int, str | None, list[str | None]]]
    #: ``(index, info.parentID)`` of assistant messages whose ``summary`` is ``true``
    summaries: list[tuple[int, str | None]]
    #: index of the first message with this ``info.id``, or None
    index_of: Callable[[str], int | None]


class CompactionSlice(NamedTuple):
    """Stage 1's answer: indexes of the kept messages, in output order, and what was found."""

    kept: list[int]
    detected: bool
    slice_index: int
    tail_messages: int
    #: messages `keep_last_turns` dropped from what the boundary kept (``fork_turns``)
    turn_removed: int = 0


def view_of(metas: Sequence[MessageMeta]) -> CompactionView:
    """The sparse view of a full list of message metas."""
    markers = [(i, m.id, m.markers) for i, m in enumerate(metas) if m.role == "user" and m.markers]
    summaries = [
        (i, m.parent_id) for i, m in enumerate(metas) if m.summary and m.role == "assistant"
    ]
    first_index: dict[str, int] = {}
    for i, meta in enumerate(metas):
        if meta.id is not None:
            first_index.setdefault(meta.id, i)
    return CompactionView(len(metas), markers, summaries, first_index.get)


def _find_summary(view: CompactionView, marker_index: int, marker_id: str | None) -> int | None:
    """The summary of a marker: the first whose parentID is the marker's id, else the next one."""
    if marker_id is not None:
        for index, parent_id in view.summaries:
            if parent_id == marker_id:
                return index
    return next((index for index, _ in view.summaries if index > marker_index), None)


def slice_at_compaction(view: CompactionView) -> CompactionSlice:
    """Keep summary + verbatim tail + everything after the summary, as OpenCode's model sees it.

    The latest marker that has a summary wins; markers without one are ignored. Without any
    complete boundary every message is kept.
    """
    for marker_index, marker_id, tail_start_ids in reversed(view.markers):
        summary_index = _find_summary(view, marker_index, marker_id)
        if summary_index is None:
            continue
        tail: Sequence[int] = ()
        tail_start_id = tail_start_ids[0] if tail_start_ids else None
        if tail_start_id is not None:
            start = view.index_of(tail_start_id)
            if start is not None and start < marker_index:
                tail = range(start, marker_index)
        kept = [summary_index, *tail, *range(summary_index + 1, view.message_count)]
        return CompactionSlice(kept, True, summary_index, len(tail))
    return CompactionSlice(list(range(view.message_count)), False, -1, 0)


def keep_last_turns(
    sliced: CompactionSlice, is_user: Callable[[int], bool], turns: int | None
) -> CompactionSlice:
    """Stage 1's slice cut to start at the `turns`-th newest user message it keeps
    (``fork_turns``): the last N user turns and what followed them. None keeps all, as does a
    slice with fewer user messages."""
    if turns is None:
        return sliced
    seen = 0
    kept = sliced.kept
    for position in range(len(kept) - 1, -1, -1):
        if is_user(kept[position]):
            seen += 1
            if seen == turns:
                return sliced._replace(kept=kept[position:], turn_removed=position)
    return sliced
