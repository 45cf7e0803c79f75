"""Two versions of the pure-Python reference side by side in one process, their calls alternated
on the same objects (CPU time, from dicts): the A/B for a change to the reference.

The older version is a copy of its package under another name, with its own extension:

    git archive <commit> python/asyncagents | tar -x -C /tmp/old
    mv /tmp/old/python/asyncagents /tmp/old/python/asyncagents_old
    cp /tmp/before.so /tmp/old/python/asyncagents_old/   # that commit's built _core
    python3 benches/ab_reference.py /tmp/old/python --shapes mixed deep_compaction

Both versions must give the same context for every session measured (checked first).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from asyncagents import build_fork_context  # noqa: E402
from generate import SHAPES, session_objects  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="a directory holding the older package as asyncagents_old")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[200, 2_000])
    parser.add_argument("--rounds", type=int, default=0, help="calls of each (0: by size)")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.old)
    old = importlib.import_module("asyncagents_old").build_fork_context
    for size in args.sizes:
        rounds = args.rounds or max(8, 60_000 // size)
        for shape in args.shapes:
            objs = session_objects(size, shape)
            if old(objs, engine="python").text != build_fork_context(objs, engine="python").text:
                raise SystemExit(f"{shape} {size}: the two versions disagree")
            times: dict[str, list[float]] = {"a": [], "b": []}
            for r in range(rounds):
                order = (("a", old), ("b", build_fork_context))
                for tag, fork in order if r % 2 else order[::-1]:
                    start = time.process_time()
                    fork(objs, engine="python")
                    times[tag].append(time.process_time() - start)
            a, b = (statistics.median(times[t]) * 1e3 for t in ("a", "b"))
            print(f"{shape:16} {size:6}  A {a:8.2f} ms  B {b:8.2f} ms  B/A {b / a:.2f}", flush=True)
            del objs
            gc.collect()


if __name__ == "__main__":
    main()
