"""`ForkStats`: what the pipeline did, in the seed's field names as aliases."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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
