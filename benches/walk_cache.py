"""Is the Rust walk of message dicts bound by its own work or by memory latency?

Times the stage that touches every input object (`_core.from_objects` for the Rust engine,
`read_session` for the reference) on 2,000 messages of each shape, three ways:

- hot: the same objects walked again and again (they stay in the CPU caches);
- cold: a 64 MB read between walks pushes them out of the caches;
- scattered: the session parsed after other sessions were parsed and freed, so its objects
  sit in reused, scattered heap slots (as in a long-running server), walked cold.

A walk whose time grows from hot to cold to scattered waits on memory, not on work; the
reference, whose time is its own interpretation, barely moves.

    python benches/walk_cache.py [shape ...]
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from asyncagents import _core
from asyncagents.reference.session import read_session
from generate import SHAPES, session_bytes

EVICT = bytes(64_000_000)


def _evict() -> None:
    EVICT.count(b"\x01")  # streams 64 MB through the caches


def _median_ms(walk: Callable[[Any], object], objects: Any, cold: bool, rounds: int = 15) -> float:
    times = []
    for _ in range(rounds):
        if cold:
            _evict()
        start = time.perf_counter()
        walk(objects)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _scattered(data: bytes) -> Any:
    """`data` parsed into a heap full of freed slots: parse other sessions, free every other
    message, then parse ours."""
    others = [json.loads(session_bytes(2_000, shape)) for shape in ("mixed", "small_parts")]
    for other in others:
        del other[::2]
    parsed = json.loads(data)
    del others
    gc.collect()
    return parsed


def main(shapes: list[str]) -> None:
    print("| shape | walk | hot | cold | scattered, cold |")
    print("|---|---|---:|---:|---:|")
    for shape in shapes:
        data = session_bytes(2_000, shape)
        fresh = json.loads(data)
        scattered = _scattered(data)
        for name, walk in (("Rust", _core.from_objects), ("reference", read_session)):
            hot = _median_ms(walk, fresh, cold=False)
            cold = _median_ms(walk, fresh, cold=True)
            far = _median_ms(walk, scattered, cold=True)
            print(f"| `{shape}` | {name} | {hot:.2f} ms | {cold:.2f} ms | {far:.2f} ms |")


if __name__ == "__main__":
    main(sys.argv[1:] or list(SHAPES))
