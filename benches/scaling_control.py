"""Is the Rust engine's 20k/2k time ratio its own work, or the size of the input in memory?

Times the walk of the message dicts (`_core.from_objects`, the stage that touches every input
object) on 2,000 messages, on 20,000 distinct messages, and on the same 2,000 message objects
listed 10 times: the same work as 20,000 messages over a tenth of the memory. If the repeated
list takes ~10x and the distinct one more, the extra is memory traffic, not work per message.

    python benches/scaling_control.py
"""

from __future__ import annotations

import statistics
import timeit

from asyncagents import _core
from generate import session_objects


def median_ms(fn: object, repeat: int = 15) -> float:
    return statistics.median(timeit.repeat(fn, number=1, repeat=repeat)) * 1e3  # type: ignore[arg-type]


def main() -> None:
    small = session_objects(2_000)
    big = session_objects(20_000)
    repeated = small * 10
    base = median_ms(lambda: _core.from_objects(small))
    rows = [
        ("2,000 messages", base),
        ("20,000 distinct messages", median_ms(lambda: _core.from_objects(big))),
        ("the 2,000 message objects x 10", median_ms(lambda: _core.from_objects(repeated))),
    ]
    print("| walk of the message dicts | median | vs. 2,000 |")
    print("|---|---:|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} ms | {ms / base:.1f}x |")


if __name__ == "__main__":
    main()
