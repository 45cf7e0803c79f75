"""The fork's character budget, sized to the child model's context window.

A forked child's first request holds OpenCode's own system prompt and tool schemas, the
inherited context, and the task's prompt; the model must also have room for its answer. So the
context may take at most ``(limit.context - limit.output - OPENCODE_OVERHEAD_TOKENS)`` tokens,
written as characters at `CHARS_PER_TOKEN`, and never more than the pipeline's default budget.

`CHARS_PER_TOKEN` is 3: English prose tokenises at about 4 characters a token, but what a fork
inherits is mostly code, JSON tool input and tool output, which tokenise denser (about 3), and
non-English text denser still. Counting 3 keeps a context that is mostly code inside the window;
a context of prose then uses about three quarters of the room it was given.
"""

from __future__ import annotations

from ..config import ForkConfig
from ..constants import FORK_CHAR_BUDGET, FORK_CHAR_NO_REMOVAL
from .catalog import ModelInfo

#: characters counted per token when the budget is written in characters
CHARS_PER_TOKEN = 3
#: what OpenCode itself sends with every request of the default agent: measured with 1.18.33,
#: a 9,600-character system prompt and 22,700 characters of tool schemas, about 8,000 tokens
OPENCODE_OVERHEAD_TOKENS = 8_000
#: characters kept for the preamble the pipeline writes before the context (about 600)
PREAMBLE_RESERVE_CHARS = 1_000


def fork_config(
    model: str | None, info: ModelInfo | None, fork_turns: int | None, prompt_chars: int = 0
) -> ForkConfig:
    """The `ForkConfig` for a child on `model` (None: the server's default) whose limits are
    `info` (None: the server does not say) and whose prompt is `prompt_chars` long: the
    budget, the reason for it, and `fork_turns`.
    The fork stats always record the reason; `preamble_config` says when the child reads it."""
    shown = model or "the server's default model"
    if info is None or info.context is None:
        budget = FORK_CHAR_BUDGET
        reason = f"the default, as the context window of {shown} is not known"
    else:
        output = info.output or 0
        tokens = max(0, info.context - output - OPENCODE_OVERHEAD_TOKENS)
        fits = max(0, tokens * CHARS_PER_TOKEN - PREAMBLE_RESERVE_CHARS - prompt_chars)
        budget = min(FORK_CHAR_BUDGET, fits)
        sized = (
            f"sized to the context window of {shown}: {info.context} tokens, less {output} for "
            f"output and {OPENCODE_OVERHEAD_TOKENS} for OpenCode's system prompt and tools, at "
            f"{CHARS_PER_TOKEN} characters a token, less {PREAMBLE_RESERVE_CHARS} characters "
            f"for this preamble and {prompt_chars} for the task's prompt"
        )
        reason = (
            sized
            if fits <= FORK_CHAR_BUDGET
            else f"the default, which is smaller than what fits ({sized}: {fits} characters)"
        )
    return ForkConfig(
        char_budget=budget,
        # below the default budget, "no removal up to 120,000 characters" would let a context
        # past the budget through: the budget alone decides
        char_no_removal=min(FORK_CHAR_NO_REMOVAL, budget),
        budget_reason=reason,
        fork_turns=fork_turns,
    )


def preamble_config(config: ForkConfig) -> ForkConfig:
    """What the pipeline gets: the reason is said in the preamble only when the budget is not
    the default (a fork to a large model reads exactly the seed's preamble)."""
    if config.char_budget < FORK_CHAR_BUDGET:
        return config
    return config.model_copy(update={"budget_reason": None})
