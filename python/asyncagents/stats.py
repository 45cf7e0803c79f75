"""`ForkStats`: what the pipeline did, in the seed's field names as aliases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from . import _core


class TierDistribution(BaseModel):
    """Tool results per tier, counted after compaction slicing and before budget trimming."""

    model_config = ConfigDict(frozen=True)

    tier1: int = 0
    tier2: int = 0
    tier3: int = 0


class ForkStats(BaseModel):
    """Stats of one pipeline run. ``model_dump(by_alias=True)`` gives the seed's camelCase."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    original_count: int
    final_count: int
    total_chars: int
    truncated_results: int
    removed_messages: int
    compaction_detected: bool
    compaction_slice_index: int
    tier_distribution: TierDistribution
    head_tail_applied: int
    compacted_results: int
    compaction_tail_messages: int
    hard_capped: bool


#: A model of `values` (every field, in field order, of the right types), made as pydantic's
#: ``model_construct`` makes one but without its Python loop over the fields and their aliases
#: (15 us for `ForkStats`, more than a small fork's render; validation takes 4 us), and without
#: a Python frame (``object.__new__`` and four ``object.__setattr__`` calls, made from the Rust
#: core: 0.5 us, not 1.1). Only for models without validators, extras or private attributes,
#: from values the engines computed themselves.
built = _core._construct


#: tier distributions made (frozen, so one serves every run with the same counts)
_TIERS: dict[Sequence[Any], TierDistribution] = {}
_TIERS_KEPT = 1024


def engine_stats(original_count: int, out: Sequence[Any]) -> ForkStats:
    """The stats of one run, from what an engine returned: ``(context, final_count,
    total_chars, truncated_results, removed_messages, tier1, tier2, tier3, head_tail_applied,
    compacted_results, hard_capped, compaction_detected, compaction_slice_index,
    compaction_tail_messages, …)`` (ints and bools)."""
    counts = out[5:8]
    tiers = _TIERS.get(counts)
    if tiers is None:
        tiers = built(TierDistribution, dict(zip(("tier1", "tier2", "tier3"), counts, strict=True)))
        if len(_TIERS) >= _TIERS_KEPT:
            _TIERS.clear()
        _TIERS[counts] = tiers
    values = {
        "original_count": original_count,
        "final_count": out[1],
        "total_chars": out[2],
        "truncated_results": out[3],
        "removed_messages": out[4],
        "compaction_detected": out[11],
        "compaction_slice_index": out[12],
        "tier_distribution": tiers,
        "head_tail_applied": out[8],
        "compacted_results": out[9],
        "compaction_tail_messages": out[13],
        "hard_capped": out[10],
    }
    return built(ForkStats, values)
