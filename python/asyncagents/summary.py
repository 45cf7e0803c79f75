"""What a fork kept and cut, in a few lines a person reads at a glance (``fork --stats``)."""

from __future__ import annotations

from .config import ForkConfig
from .fork import ForkContext


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def fork_summary(ctx: ForkContext, source: str, size: int, config: ForkConfig) -> str:
    """The summary of `ctx`, made from `source` (a name for the input) of `size` bytes."""
    stats = ctx.stats
    lines = [f"asyncagents fork: {source}, {_plural(stats.original_count, 'message')}"]
    lines[0] += f" ({size:,} bytes)"
    if not ctx.text:
        lines.append("  nothing to inject: the session has no message a child could use")
        return "\n".join(lines) + "\n"
    shown = stats.final_count
    lines.append(
        f"  kept:          {_plural(shown, 'message')} in a context of "
        f"{len(ctx.text):,} characters (budget {config.char_budget:,})"
    )
    candidates = stats.final_count + stats.removed_messages
    if stats.compaction_detected:
        cut = max(stats.original_count - candidates, 0)
        lines.append(
            f"  compaction:    {_plural(cut, 'message')} cut before the latest summary; it and "
            f"its tail of {stats.compaction_tail_messages:,} kept"
        )
    else:
        lines.append("  compaction:    none in the session")
    if stats.hard_capped:
        fitting = "the newest message alone was over the budget: its text cut head and tail"
    elif stats.removed_messages:
        fitting = f"dropped the {_plural(stats.removed_messages, 'oldest message')} to fit"
    else:
        fitting = "nothing dropped: every kept message fits"
    lines.append(f"  budget:        {fitting}")
    tiers = stats.tier_distribution
    total = tiers.tier1 + tiers.tier2 + tiers.tier3
    if total:
        lines.append(
            f"  tool results:  {total:,}: the {tiers.tier1:,} newest whole, the next "
            f"{tiers.tier2:,} to {config.tier2_limit:,} characters, {tiers.tier3:,} older to "
            f"{config.tier3_limit:,}"
        )
        lines.append(
            f"                 {stats.truncated_results:,} cut ({stats.head_tail_applied:,} "
            f"keeping head and tail), {stats.compacted_results:,} cleared by OpenCode before"
        )
    else:
        lines.append("  tool results:  none")
    return "\n".join(lines) + "\n"
