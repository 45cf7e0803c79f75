"""The fixed cost of a call: a 10-message session from dicts, the whole `build_fork_context`
call against the engine alone (`_core` directly: the walk, then `ParsedSession.fork`, the
compaction slice and the render, as `ab.py` times it). The difference is the Python wrapper's
share (the config, the result and stats objects, the preamble).

    python3 benches/fixed_cost.py --messages 10

Medians of interleaved calls, on the same list, for each shape; with `--passes K`, the pass
of each shape whose whole-call median is the lowest of K.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ab  # noqa: E402
from ab import one_call  # noqa: E402
from asyncagents import _core, build_fork_context  # noqa: E402
from asyncagents.config import ForkConfig  # noqa: E402
from generate import SHAPES, session_objects  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3_000)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument(
        "--cpu", action="store_true", help="the thread's CPU time, not wall time (a shared machine)"
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=1,
        help="measure every shape this many times, one pass after another, and keep each"
        " shape's pass with the lowest whole-call median (a shared machine's bursts of load"
        " last seconds: a pass of a shape takes one)",
    )
    args = parser.parse_args(argv)
    clock = time.thread_time if args.cpu else time.perf_counter
    ab.CLOCK = clock
    config = ForkConfig()
    best: dict[str, tuple[float, float]] = {}
    for _ in range(max(args.passes, 1)):
        for shape in args.shapes:
            messages = session_objects(args.messages, shape)
            whole: list[float] = []
            engine: list[float] = []
            for _ in range(args.rounds):
                start = clock()
                build_fork_context(messages)
                whole.append(clock() - start)
                engine.append(one_call(_core, messages, config)[1])
            measured = statistics.median(whole) * 1e6, statistics.median(engine) * 1e6
            if shape not in best or measured[0] < best[shape][0]:
                best[shape] = measured
    print("| shape | messages | whole call | engine alone | wrapper | wrapper share |")
    print("|---|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        w, e = best[shape]
        print(
            f"| `{shape}` | {args.messages} | {w:.1f} µs | {e:.1f} µs | {w - e:.1f} µs"
            f" | {(w - e) / w:.0%} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
