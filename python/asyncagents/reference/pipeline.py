"""The reference pipeline end to end: records → stage 1 → stage 2 → stage 3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compaction import CompactionSlice, keep_last_turns, slice_at_compaction
from ..config import ForkConfig
from .budget import FRAME, Fitted, fit_to_budget, must_remove
from .session import Message, Rendered, check_written, read_bodies, read_session
from .transcript import format_message, params_limits
from .truncate import ResultCounts, ResultTiers


def run_reference(
    messages: Sequence[Any], config: ForkConfig
) -> tuple[CompactionSlice, ResultCounts, Fitted]:
    """Run all three stages on plain message dicts (already parsed)."""
    session = read_session(messages)
    sliced = slice_at_compaction(session.view)
    records = read_bodies(session, sliced.kept)
    sliced = keep_last_turns(sliced, lambda i: records[i].role == "user", config.fork_turns)
    kept = [records[i] for i in sliced.kept]
    counts, newest_first, rendered = render_newest_first(kept, config)
    fitted = fit_to_budget(newest_first, len(kept), config)
    last = len(kept) - 1
    shown = range(last - fitted.final_count + 1, last + 1)  # in context order
    check_written((sliced.kept[m], kept[m], rendered[last - m]) for m in shown)
    return sliced, counts, fitted


def render_newest_first(
    kept: list[Message], config: ForkConfig
) -> tuple[ResultCounts, list[tuple[str, str]], list[Rendered | None]]:
    """Stages 2 and 3a in one walk from the newest message: results are numbered as they come,
    and blocks are formatted until the context is sure to lose its older messages (those are
    only counted). Each block comes with the cut texts of its results where the lone surrogate
    check needs them (`check_written`; None for a message without texts to check, so that
    the others are freed as they go)."""
    tiers = ResultTiers(config)
    blocks: list[tuple[str, str]] = []
    renders: list[Rendered | None] = []
    limits = params_limits(config)
    size = FRAME
    rendering = True
    for message in reversed(kept):
        if not rendering:
            for result in reversed(message.results):
                tiers.take(result, render=False)
            continue
        rendered: Rendered = {
            result: tiers.take(result, render=True) for result in reversed(message.results)
        }
        head, body = format_message(message, rendered, limits)
        blocks.append((head, body))
        renders.append(rendered if message.unchecked else None)
        size += len(head) + len(body)
        rendering = not must_remove(size, config)
    return tiers.counts, blocks, renders
