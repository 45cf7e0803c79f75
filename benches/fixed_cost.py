"""The fixed cost of a call: a 10-message session from dicts, the whole `build_fork_context`
call against the engine alone (`_core` directly: the walk, then `ParsedSession.fork`, the
compaction slice and the render, as `ab.py` times it). The difference is the Python wrapper's
share (the config, the result and stats objects, the preamble, the text). Two of its parts are
timed apart, on the same call's output: the objects (the stats, the preamble looked up, the
result) and the copy of the context into `text` (``preamble + "\n\n" + context``, a second
string of the context's size that the result holds beside `context`).

    python3 benches/fixed_cost.py --messages 10

Medians of interleaved calls, on the same list, for each shape; with `--passes K`, the pass
of each shape whose whole-call median is the lowest of K.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ab  # noqa: E402
from ab import one_call  # noqa: E402
from asyncagents import _core, build_fork_context  # noqa: E402
from asyncagents.config import ForkConfig  # noqa: E402
from asyncagents.fork import ForkContext  # noqa: E402
from asyncagents.preamble import cached_preamble  # noqa: E402
from asyncagents.stats import built, engine_stats  # noqa: E402
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
    best: dict[str, tuple[float, ...]] = {}
    for _ in range(max(args.passes, 1)):
        for shape in args.shapes:
            messages = session_objects(args.messages, shape)
            session = _core.from_objects(messages)
            out = session.fork(config)
            count = len(session)
            made = build_fork_context(messages)
            whole: list[float] = []
            engine: list[float] = []
            objects: list[float] = []
            copies: list[float] = []
            for _ in range(args.rounds):
                start = clock()
                build_fork_context(messages)
                whole.append(clock() - start)
                engine.append(one_call(_core, messages, config)[1])
                objects.append(_objects_time(clock, count, out, config))
                copies.append(_copy_time(clock, made.preamble, made.context))
            measured = tuple(statistics.median(t) * 1e6 for t in (whole, engine, objects, copies))
            if shape not in best or measured[0] < best[shape][0]:
                best[shape] = measured
    print(
        "| shape | messages | whole call | engine alone | wrapper | wrapper share"
        " | of it: objects | of it: `text` copy | of it: the rest |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        w, e, o, c = best[shape]
        print(
            f"| `{shape}` | {args.messages} | {w:.1f} µs | {e:.1f} µs | {w - e:.1f} µs"
            f" | {(w - e) / w:.0%} | {o:.1f} µs | {c:.1f} µs | {w - e - o - c:.1f} µs |",
            flush=True,
        )


def _objects_time(
    clock: Callable[[], float], count: int, out: tuple[Any, ...], config: ForkConfig
) -> float:
    """Seconds to make the wrapper's objects of one call: the stats, the preamble (looked up),
    the result (its `text` is given, not copied: that is timed apart). A mean over `_REPEAT`
    makes, as a clock read costs about as much as one."""
    start = clock()
    for _ in _REPEAT:
        stats = engine_stats(count, out)
        preamble = cached_preamble(stats, config, out[14], (out[4:12], out[14]))
        built(
            ForkContext,
            {"text": out[0], "preamble": preamble, "context": out[0], "stats": stats},
        )
    return (clock() - start) / len(_REPEAT)


def _copy_time(clock: Callable[[], float], preamble: str, context: str) -> float:
    """Seconds to copy the context into a text as the wrapper does (a mean over `_REPEAT`)."""
    start = clock()
    for _ in _REPEAT:
        f"{preamble}\n\n{context}"  # the copy is what is timed
    return (clock() - start) / len(_REPEAT)


#: how many times a part of the wrapper is made in one timed span
_REPEAT = range(20)


if __name__ == "__main__":
    main()
