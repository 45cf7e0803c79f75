"""Reference stage 3b: frame the transcript and drop the oldest messages to fit the budget."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from ..config import ForkConfig
from .truncate import cut_head_tail

OPEN = "<inherited_context>"
CLOSE = "\n</inherited_context>"
FRAME = len(OPEN) + len(CLOSE)
#: Room kept for the hard cap's marker (its digits included).
HARD_CAP_RESERVE = 36


@dataclass(slots=True)
class Fitted:
    """The framed context and what fitting it cost."""

    context: str
    final_count: int
    removed: int
    hard_capped: bool


def must_remove(size_so_far: int, config: ForkConfig) -> bool:
    """Whether a context that is already this long (frame included) will lose its oldest
    messages: then no block older than the budget's cut needs formatting."""
    return size_so_far > config.char_no_removal and size_so_far > config.char_budget


def fit_to_budget(
    newest_first: list[tuple[str, str]], message_count: int, config: ForkConfig
) -> Fitted:
    """Keep the newest blocks that fit; sizes are summed once, never re-formatted.

    `newest_first` holds the blocks of the newest kept messages, newest first: all
    `message_count` of them, or as many as it took for `must_remove` to become true.
    """
    if not message_count:
        return Fitted("", 0, 0, False)
    sizes = [len(head) + len(body) for head, body in newest_first]
    if len(newest_first) == message_count and not must_remove(FRAME + sum(sizes), config):
        return Fitted(_framed(newest_first), message_count, 0, False)

    # Walk from the newest message back while the running total fits.
    kept = 0
    running = FRAME
    for size in sizes:
        if running + size > config.char_budget:
            break
        running += size
        kept += 1
    if kept:
        return Fitted(_framed(newest_first[:kept]), kept, message_count - kept, False)

    # Even the newest message alone is too big: cut its body head+tail.
    head, body = newest_first[0]
    limit = max(0, config.char_budget - (FRAME + len(head)) - HARD_CAP_RESERVE)
    if len(body) > limit:
        body = cut_head_tail(body, limit, config)
    return Fitted(OPEN + head + body + CLOSE, 1, message_count - 1, True)


def _framed(newest_first: list[tuple[str, str]]) -> str:
    """The blocks, oldest first, in the frame: one join, one copy of each block."""
    return "".join(chain((OPEN,), chain.from_iterable(reversed(newest_first)), (CLOSE,)))
