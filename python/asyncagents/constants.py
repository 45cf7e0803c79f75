"""The seed's fork constants; they are the defaults of `ForkConfig`."""

from __future__ import annotations

from typing import Final

#: Max characters in the formatted context.
FORK_CHAR_BUDGET: Final = 200_000
#: At or below this many characters no message is removed.
FORK_CHAR_NO_REMOVAL: Final = 120_000

#: Newest tool results kept whole.
FORK_TIER1_COUNT: Final = 5
#: Tool results after tier 1 that are cut to `FORK_TIER2_LIMIT`.
FORK_TIER2_COUNT: Final = 10
FORK_TIER2_LIMIT: Final = 3_000
FORK_TIER3_LIMIT: Final = 500

#: Tool parameter preview limits by the tier of the call's result.
FORK_PARAMS_TIER1: Final = 500
FORK_PARAMS_TIER2: Final = 200
FORK_PARAMS_TIER3: Final = 100

FORK_HEAD_RATIO: Final = 0.8
FORK_TAIL_RATIO: Final = 0.2

#: Substrings (case-sensitive) that make a cut result keep its tail too.
FORK_ERROR_PATTERNS: Final = (
    "error",
    "Error",
    "ERROR",
    "failed",
    "FAILED",
    "exception",
    "traceback",
)
#: Tool-name substrings whose results are cut head+tail.
FORK_HEAD_TAIL_KEYWORDS: Final = ("bash", "pty", "exec")

#: What OpenCode shows its model in place of a pruned tool output.
FORK_CLEARED_MARKER: Final = "[Old tool result content cleared]"
