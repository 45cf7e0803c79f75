"""Reference stage 3b: frame the transcript and drop the oldest messages to fit the budget."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ForkConfig
from .truncate import cut_head_tail

OPEN = "<inherited_context>"
CLOSE = "\n</inherited_context>"
#: Room kept for the hard cap's marker (its digits included).
HARD_CAP_RESERVE = 36


@dataclass(slots=True)
class Fitted:
    """The framed context and what fitting it cost."""

    context: str
    final_count: int
    removed: int
    hard_capped: bool


def fit_to_budget(blocks: list[tuple[str, str]], config: ForkConfig) -> Fitted:
    """Keep the newest messages whose blocks fit; sizes are summed once, never re-formatted."""
    if not blocks:
        return Fitted("", 0, 0, False)
    frame = len(OPEN) + len(CLOSE)
    sizes = [len(head) + len(body) for head, body in blocks]
    total = frame + sum(sizes)
    if total <= config.char_no_removal or total <= config.char_budget:
        return Fitted(OPEN + "".join(h + b for h, b in blocks) + CLOSE, len(blocks), 0, False)

    # Walk from the newest message back while the running total fits.
    first = len(blocks)
    running = frame
    while first > 0 and running + sizes[first - 1] <= config.char_budget:
        first -= 1
        running += sizes[first]
    if first < len(blocks):
        kept = blocks[first:]
        return Fitted(OPEN + "".join(h + b for h, b in kept) + CLOSE, len(kept), first, False)

    # Even the newest message alone is too big: cut its body head+tail.
    head, body = blocks[-1]
    limit = max(0, config.char_budget - (frame + len(head)) - HARD_CAP_RESERVE)
    if len(body) > limit:
        body = cut_head_tail(body, limit, config)
    return Fitted(OPEN + head + body + CLOSE, 1, len(blocks) - 1, True)
