"""Two builds of the Rust engine side by side in one process, their calls alternated on the same
objects, so both meet the same heap and the same machine: the A/B for a change to the engine.

Separate processes parse the sessions into different heaps, and from dicts the walk's time moves
with where the objects lie (see docs/fork-performance.md), often by more than a change gains.
Here both builds walk the very same objects, round after round, in alternating order.

    # build the engine before the change, keep its extension, build after the change
    cp python/asyncagents/_core*.so /tmp/before.so
    ...
    python3 benches/ab.py /tmp/before.so python/asyncagents/_core*.so --shapes mixed legacy

Prints the median of the walk alone (`from_objects`) and of the whole call (walk, compaction
slice, render) for each build and the ratio B/A; `--fresh` parses a new list before each call.
`--bytes` gives both builds the JSON bytes instead: "walk" is then their parse (`parse_json`).

Alternated one call at a time, a build's walk follows the other build's render. A change to
what a render leaves in the cache (how it reads the text it searches) then shows in the other
build's walk: `--block K` runs K calls of one build in a row and times only the last K - 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from asyncagents.compaction import CompactionView, slice_at_compaction  # noqa: E402
from asyncagents.config import ForkConfig  # noqa: E402
from generate import SHAPES, session_bytes  # noqa: E402

#: the clock of `one_call` (`time.thread_time` for CPU time, as `--cpu` of the scripts using it)
CLOCK = time.perf_counter


def load(path: str, tag: str) -> ModuleType:
    """An extension module `_core` from `path`, under a package name of its own."""
    spec = importlib.util.spec_from_file_location(f"ab_{tag}._core", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_call(core: ModuleType, messages: object, config: ForkConfig) -> tuple[float, float]:
    """Seconds of the walk (the parse, for bytes) and of the whole call (the engine's `fork`:
    stage 1 and the render; a build from before it had `fork` runs stage 1 in Python)."""
    start = CLOCK()
    session = (
        core.parse_json(messages) if isinstance(messages, bytes) else core.from_objects(messages)
    )
    walked = CLOCK()
    if hasattr(session, "fork"):
        session.fork(config)
    else:
        count, markers, summaries = session.compaction_view()
        view = CompactionView(count, markers, summaries, session.index_of)
        session.render(slice_at_compaction(view).kept, config)
    done = CLOCK()
    del session  # its strings are released outside the timed span
    return walked - start, done - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the extension before the change (a _core*.so)")
    parser.add_argument("b", help="the extension after the change")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fresh", action="store_true", help="a new list for every call")
    parser.add_argument("--bytes", action="store_true", help="from the JSON bytes, not dicts")
    parser.add_argument(
        "--cpu", action="store_true", help="the thread's CPU time, not wall time (a shared machine)"
    )
    parser.add_argument(
        "--block",
        type=int,
        default=1,
        help="calls of one build in a row (the first two of a block of 3 or more untimed)",
    )
    args = parser.parse_args(argv)
    if args.cpu:
        global CLOCK
        CLOCK = time.thread_time
    builds = {"A": load(args.a, "a"), "B": load(args.b, "b")}
    config = ForkConfig()
    for shape in args.shapes:
        raw = session_bytes(args.messages, shape)
        messages: object = raw if args.bytes else json.loads(raw)
        times: dict[str, tuple[list[float], list[float]]] = {"A": ([], []), "B": ([], [])}
        for _ in range(3):  # untimed: both builds once over the objects
            for core in builds.values():
                one_call(core, messages, config)
        untimed = 2 if args.block >= 3 else 0
        for n in range(args.rounds):
            for tag in ("A", "B") if n % 2 == 0 else ("B", "A"):
                for k in range(max(args.block, 1)):
                    if args.fresh and not args.bytes:
                        messages = json.loads(raw)
                    walk, whole = one_call(builds[tag], messages, config)
                    if k >= untimed:
                        times[tag][0].append(walk)
                        times[tag][1].append(whole)
        (a_walk, a_whole), (b_walk, b_whole) = (
            (statistics.median(times[t][0]) * 1e3, statistics.median(times[t][1]) * 1e3)
            for t in ("A", "B")
        )
        print(
            f"{shape:16} walk A {a_walk:7.3f} B {b_walk:7.3f} ms  B/A {b_walk / a_walk:.3f}"
            f"   whole A {a_whole:7.3f} B {b_whole:7.3f} ms  B/A {b_whole / a_whole:.3f}"
        )


if __name__ == "__main__":
    main()
