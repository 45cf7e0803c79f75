"""Stage 1: find the latest complete compaction boundary and decide which messages stay.

Works on `MessageMeta` tuples, which both engines produce (the reference from dicts, the Rust
engine from its parsed session), so there is one implementation of these rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class MessageMeta(NamedTuple):
    """What stage 1 needs of one message."""

    role: str | None
    id: str | None
    parent_id: str | None
    #: ``info.summary`` is JSON ``true`` (a compaction summary; on user messages it is an object)
    summary: bool
    #: one entry per ``compaction`` part of a user message: its ``tail_start_id`` or None
    markers: list[str | None]


class CompactionSlice(NamedTuple):
    """Stage 1's answer: indexes of the kept messages, in output order, and what was found."""

    kept: list[int]
    detected: bool
    slice_index: int
    tail_messages: int


def _find_summary(metas: Sequence[MessageMeta], marker_index: int) -> int | None:
    """The summary of the marker at `marker_index`: by parentID, else the first one after it."""
    marker_id = metas[marker_index].id
    if marker_id is not None:
        for i, meta in enumerate(metas):
            if meta.summary and meta.role == "assistant" and meta.parent_id == marker_id:
                return i
    for i in range(marker_index + 1, len(metas)):
        if metas[i].summary and metas[i].role == "assistant":
            return i
    return None


def slice_at_compaction(metas: Sequence[MessageMeta]) -> CompactionSlice:
    """Keep summary + verbatim tail + everything after the summary, as OpenCode's model sees it.

    The latest marker that has a summary wins; markers without one are ignored. Without any
    complete boundary every message is kept.
    """
    for marker_index in range(len(metas) - 1, -1, -1):
        meta = metas[marker_index]
        if meta.role != "user" or not meta.markers:
            continue
        summary_index = _find_summary(metas, marker_index)
        if summary_index is None:
            continue
        tail: list[int] = []
        tail_start_id = meta.markers[0]
        if tail_start_id is not None:
            start = next((i for i, m in enumerate(metas) if m.id == tail_start_id), None)
            if start is not None and start < marker_index:
                tail = list(range(start, marker_index))
        kept = [summary_index, *tail, *range(summary_index + 1, len(metas))]
        return CompactionSlice(kept, True, summary_index, len(tail))
    return CompactionSlice(list(range(len(metas))), False, -1, 0)
