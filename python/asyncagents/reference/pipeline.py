"""The reference pipeline end to end: records → stage 1 → stage 2 → stage 3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compaction import CompactionSlice, slice_at_compaction, view_of
from ..config import ForkConfig
from .budget import Fitted, fit_to_budget
from .session import read_messages
from .transcript import format_message
from .truncate import ResultCounts, process_results


def run_reference(
    messages: Sequence[Any], config: ForkConfig
) -> tuple[CompactionSlice, ResultCounts, Fitted]:
    """Run all three stages on plain message dicts (already parsed)."""
    records = read_messages(messages)
    sliced = slice_at_compaction(view_of([record.meta for record in records]))
    kept = [records[i] for i in sliced.kept]
    results, params, counts = process_results(kept, config)
    blocks = [format_message(msg, m, results, params, config) for m, msg in enumerate(kept)]
    return sliced, counts, fit_to_budget(blocks, config)
