"""The preamble that tells a forked child what the pipeline cut."""

from __future__ import annotations

from .config import ForkConfig
from .stats import ForkStats

_ADVICE = "If you need complete file contents or detailed results, re-read the files directly."


#: preambles made, by config object and the counts they say (with the config, so that its id
#: names no other object while it is here): forks of one parent mostly say the same
_MADE: dict[tuple[int, object], tuple[ForkConfig, str]] = {}
#: preambles kept at most (then the cache starts again)
_MADE_KEPT = 256


def build_preamble(stats: ForkStats, config: ForkConfig, *, turn_removed: int = 0) -> str:
    """The exact preamble of DECISIONS.md for these stats; numbers come from the config.

    Two lines beyond the contract's, only where they apply: the user turns ``fork_turns`` kept
    (`turn_removed` older messages dropped), and why the budget is what it is
    (``budget_reason``)."""
    return _preamble(stats, config, turn_removed)


def cached_preamble(stats: ForkStats, config: ForkConfig, turn_removed: int, key: object) -> str:
    """`build_preamble`, made once per config object and `key`, a hashable value that holds
    every count the preamble says (the tiers, ``compaction_detected``, ``compacted_results``,
    ``removed_messages``, ``hard_capped`` and `turn_removed`), and maybe more."""
    made = _MADE.get((id(config), key))
    if made is not None and made[0] is config:
        return made[1]
    text = _preamble(stats, config, turn_removed)
    if len(_MADE) >= _MADE_KEPT:
        _MADE.clear()
    _MADE[id(config), key] = (config, text)
    return text


def _preamble(stats: ForkStats, config: ForkConfig, turn_removed: int) -> str:
    tiers = stats.tier_distribution
    lines = [
        "You are working with forked context from a parent agent session.",
        "Context processing applied:",
        "- Compaction summary included (messages before compaction removed)"
        if stats.compaction_detected
        else "- No compaction detected",
        f"- Tool results: {tiers.tier1} full, {tiers.tier2} truncated to {config.tier2_limit}"
        f" chars, {tiers.tier3} truncated to {config.tier3_limit} chars",
    ]
    if turn_removed > 0:
        lines.insert(
            3,
            f"- Only the last {config.fork_turns} user turns kept"
            f" ({turn_removed} earlier messages removed)",
        )
    if stats.compacted_results > 0:
        lines.append(f"- {stats.compacted_results} tool results were already cleared by compaction")
    if stats.removed_messages > 0:
        lines.append(
            f"- {stats.removed_messages} oldest messages removed to fit"
            f" {config.char_budget} char budget"
        )
    else:
        lines.append("- All messages preserved")
    if stats.hard_capped:
        lines.append(f"- The newest message was cut to fit the {config.char_budget} char budget")
    if config.budget_reason:
        lines.append(f"- Char budget {config.char_budget}: {config.budget_reason}")
    lines.append(
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    return "\n".join(lines)
