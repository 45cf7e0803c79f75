"""What the private dict probe buys: the engine with it and without it, in one process.

On CPython 3.11 to 3.13 the walk reads the caller's dict tables itself (`input/dict.rs`); on
any other interpreter, or with `ASYNCAGENTS_PORTABLE_DICTS=1`, every lookup is CPython's own
(the portable path). The switch is read once per loaded extension, at its first walk, so the
same extension is loaded twice, from two paths: once with the probe, once with the variable
set. Their calls then alternate on the very same objects (as `ab.py` does for two builds), so
both meet the same heap.

    python3 benches/dict_probe.py --messages 200 2000

Prints, per shape and size, the median of the walk (`from_objects`) and of the whole engine
call (walk, compaction slice, render), and portable / probe.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ab  # noqa: E402
import asyncagents._core  # noqa: E402
from ab import load, one_call  # noqa: E402
from asyncagents.config import ForkConfig  # noqa: E402
from generate import SHAPES, session_objects  # noqa: E402

SWITCH = "ASYNCAGENTS_PORTABLE_DICTS"


def builds() -> dict[str, ModuleType]:
    """The installed extension loaded twice: "probe" as is, "portable" with `SWITCH` set at
    its first walk."""
    source = asyncagents._core.__file__
    assert source is not None
    folder = Path(tempfile.mkdtemp(prefix="dict-probe-"))
    loaded: dict[str, ModuleType] = {}
    for tag, portable in (("probe", False), ("portable", True)):
        copy = folder / f"{tag}{Path(source).name[len('_core') :]}"
        shutil.copyfile(source, copy)
        saved = os.environ.pop(SWITCH, None)
        if portable:
            os.environ[SWITCH] = "1"
        try:
            core = load(str(copy), tag)
            core.from_objects([])  # the first walk reads the switch
        finally:
            os.environ.pop(SWITCH, None)
            if saved is not None:
                os.environ[SWITCH] = saved
        if core._probes_dict_tables() == portable:
            raise SystemExit(
                f"the {tag} build {'probes' if portable else 'does not probe'} dict tables"
                " (a CPython other than 3.11-3.13 has no probe to compare)"
            )
        loaded[tag] = core
    return loaded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--messages", nargs="+", type=int, default=[200, 2_000])
    parser.add_argument("--rounds", type=int, default=0, help="default: 200 under 1,000, else 40")
    parser.add_argument(
        "--cpu", action="store_true", help="the thread's CPU time, not wall time (a shared machine)"
    )
    args = parser.parse_args(argv)
    if args.cpu:
        ab.CLOCK = time.thread_time
    cores = builds()
    config = ForkConfig()
    print(
        "| shape | messages | walk, probe | walk, portable | ratio | whole, probe"
        " | whole, portable | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.messages:
        rounds = args.rounds or (200 if size < 1_000 else 40)
        for shape in args.shapes:
            messages = session_objects(size, shape)
            times: dict[str, tuple[list[float], list[float]]] = {t: ([], []) for t in cores}
            for _ in range(3):  # untimed
                for core in cores.values():
                    one_call(core, messages, config)
            for n in range(rounds):
                for tag in ("probe", "portable") if n % 2 == 0 else ("portable", "probe"):
                    walk, whole = one_call(cores[tag], messages, config)
                    times[tag][0].append(walk)
                    times[tag][1].append(whole)
            med = {t: [statistics.median(s) * 1e3 for s in times[t]] for t in cores}
            cells = []
            for i in (0, 1):
                probe, portable = med["probe"][i], med["portable"][i]
                cells += [f"{probe:.3f} ms", f"{portable:.3f} ms", f"{portable / probe:.2f}x"]
            print(f"| `{shape}` | {size:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
