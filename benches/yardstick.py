"""The reference (``engine="python"``) against the plain yardstick (`plain_fork.py`), shape by
shape, with the calls interleaved round by round so that all meet the same load: medians of
CPU time (``time.process_time``), which a busy machine disturbs less than wall time.

From dicts, the reference's reading is timed alone as well: checking every message's head
(`read_session`), then checking and reading the bodies of the messages stage 1 keeps
(`read_bodies`), which the plain yardstick does not do (it reads only the messages it keeps and
checks nothing). "The rest" is the reference less that: the work both do. (From bytes,
``json.loads`` dominates both and the split says little.)

    python benches/yardstick.py                 # 200 and 2,000 messages, every shape
    python benches/yardstick.py --sizes 20000 --rounds 3 --collect

With `--collect`, a full garbage collection runs before each call (untimed), so that no call
pays for the collections that the objects of the calls before it made due. At 20,000 messages
from bytes, in a process that also holds sessions as dicts (as the benchmarks' does), one full
collection takes 0.6-0.9 s, half a call, and lands in whichever call crosses CPython's
threshold: mostly inside `json.loads`, which both sides call (see docs/fork-performance.md).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from asyncagents import build_fork_context
from asyncagents.compaction import slice_at_compaction
from asyncagents.reference.session import read_bodies, read_session
from generate import SHAPES, session_bytes, session_objects
from plain_fork import plain_fork


def _read(messages: Any) -> None:
    """The reference's reading: every head, stage 1, the kept bodies."""
    session = read_session(messages)
    read_bodies(session, slice_at_compaction(session.view).kept)


def interleaved(calls: list[Callable[[], Any]], rounds: int, collect: bool = False) -> list[float]:
    """Median CPU seconds of each call, the calls taking turns in every round."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for spent, call in zip(times, calls, strict=True):
            if collect:
                gc.collect()
            start = time.process_time()
            call()
            spent.append(time.process_time() - start)
    return [statistics.median(spent) for spent in times]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2_000])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument(
        "--forms", nargs="+", choices=["dicts", "bytes"], default=["dicts", "bytes"]
    )
    parser.add_argument("--collect", action="store_true", help="gc.collect() before each call")
    args = parser.parse_args(argv)
    print(
        "| shape | messages | form | reference | of which reading and checking the messages"
        " | the rest | plain | reference / plain | the rest / plain |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        for n in args.sizes:
            for form in args.forms:
                data = session_bytes(n, shape) if form == "bytes" else session_objects(n, shape)
                calls = [
                    lambda data=data: build_fork_context(data, engine="python"),
                    lambda data=data: plain_fork(data),
                ]
                if form == "dicts":
                    calls.append(lambda data=data: _read(data))
                reference, plain, *reading = interleaved(calls, args.rounds, args.collect)
                cells = [f"`{shape}`", f"{n:,}", form, f"{reference * 1e3:.2f} ms"]
                if reading:
                    rest = reference - reading[0]
                    cells += [f"{reading[0] * 1e3:.2f} ms", f"{rest * 1e3:.2f} ms"]
                else:
                    rest = None
                    cells += ["-", "-"]
                cells += [f"{plain * 1e3:.2f} ms", f"{reference / plain:.2f}x"]
                cells.append("-" if rest is None else f"{rest / plain:.2f}x")
                print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
