"""`ForkConfig`: every number and list the pipeline uses, defaulting to the seed's constants."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from . import constants as c
from .plain import surrogate_free


class ForkConfig(BaseModel):
    """Tunables of the fork pipeline. Both engines read exactly these fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    char_budget: int = Field(default=c.FORK_CHAR_BUDGET, ge=0)
    char_no_removal: int = Field(default=c.FORK_CHAR_NO_REMOVAL, ge=0)
    tier1_count: int = Field(default=c.FORK_TIER1_COUNT, ge=0)
    tier2_count: int = Field(default=c.FORK_TIER2_COUNT, ge=0)
    tier2_limit: int = Field(default=c.FORK_TIER2_LIMIT, ge=0)
    tier3_limit: int = Field(default=c.FORK_TIER3_LIMIT, ge=0)
    params_tier1: int = Field(default=c.FORK_PARAMS_TIER1, ge=0)
    params_tier2: int = Field(default=c.FORK_PARAMS_TIER2, ge=0)
    params_tier3: int = Field(default=c.FORK_PARAMS_TIER3, ge=0)
    head_ratio: float = Field(default=c.FORK_HEAD_RATIO, ge=0.0, le=1.0)
    tail_ratio: float = Field(default=c.FORK_TAIL_RATIO, ge=0.0, le=1.0)
    error_patterns: tuple[str, ...] = c.FORK_ERROR_PATTERNS
    head_tail_keywords: tuple[str, ...] = c.FORK_HEAD_TAIL_KEYWORDS
    cleared_marker: str = c.FORK_CLEARED_MARKER
    #: keep only the last N user turns (and what followed them) of what stage 1 keeps;
    #: None keeps them all
    fork_turns: int | None = Field(default=None, ge=1)
    #: why `char_budget` is what it is (e.g. the child model's context window), said in the
    #: preamble when set
    budget_reason: str | None = None

    #: set by validation only, so that `checked` knows a `model_construct` result
    _validated: bool = PrivateAttr(default=False)

    @field_validator("error_patterns", "head_tail_keywords", "cleared_marker", "budget_reason")
    @classmethod
    def _no_lone_surrogates(
        cls, value: str | tuple[str, ...] | None
    ) -> str | tuple[str, ...] | None:
        """The texts are searched and written as Unicode: a lone surrogate is none."""
        texts = () if value is None else (value,) if isinstance(value, str) else value
        if not all(map(surrogate_free, texts)):
            raise ValueError("contains a lone surrogate")
        return value

    @model_validator(mode="after")
    def _ratios_fit(self) -> ForkConfig:
        if self.head_ratio + self.tail_ratio > 1.0:
            raise ValueError("head_ratio + tail_ratio must not exceed 1")
        self._validated = True
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with `update`, validated as a new config is (pydantic's copy skips that)."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**dict(self), **update})

    def checked(self) -> Self:
        """This config, validated: one that skipped validation (`model_construct`) is checked
        now, so that both engines get only configs they agree on, or a `ValidationError`."""
        private = self.__pydantic_private__  # the slot itself: `self._validated` is slow
        return self if private and private["_validated"] else type(self).model_validate(dict(self))

    def result_limit(self, tier: int) -> int | None:
        """Character limit of a tool result in `tier` (1, 2, 3); None means no limit."""
        return None if tier == 1 else self.tier2_limit if tier == 2 else self.tier3_limit

    def params_limit(self, tier: int) -> int:
        """Character limit of a tool call's parameter JSON whose result is in `tier`."""
        return (self.params_tier1, self.params_tier2, self.params_tier3)[tier - 1]

    def tier_of(self, index: int) -> int:
        """Tier of the result numbered `index` from the newest (0)."""
        if index < self.tier1_count:
            return 1
        return 2 if index < self.tier1_count + self.tier2_count else 3


DEFAULT_CONFIG = ForkConfig()
