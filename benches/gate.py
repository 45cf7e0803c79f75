"""The benchmark gate of CI: ratios, never absolute times, against the values recorded in
`ratios.json` beside this file.

Three shapes (`mixed`, the OpenCode shape with a compaction; `tool_ascii`, tool-heavy;
`legacy`, the older shape), at 200 and 2,000 messages, from dicts. In interleaved rounds, on
the same list, each of three calls is made untimed and then timed (as `floor.py` does):

- the Rust engine, `build_fork_context(messages)`;
- the reference, `build_fork_context(messages, engine="python")`;
- the floor: the plain C walk of `floor.c` (the reads the contract requires, with CPython's
  own lookups) plus one load of every byte of the tool results it meets.

Times are the thread's CPU time (`time.thread_time`), not wall time: on a shared machine a
call that waits for a core counts only what it ran. Two ratios of medians per case: Rust /
floor (lower is better) and reference / Rust (higher is better). A case fails when one of them
is worse than recorded by more than the tolerance, as a factor (25 %: Rust / floor above 1.25x
the recorded value, or reference / Rust below it divided by 1.25). A failing case is measured
once more, and fails the gate only if it fails again (one noisy round on a shared machine is
not a regression). Both engines lose or gain together with the machine, so a slower or faster
machine moves no ratio much.

    python3 benches/gate.py             # check; exit status 1 on a regression
    python3 benches/gate.py --record    # measure 3 times and write the median ratios to
                                        # ratios.json (commit it with the change that moved
                                        # them; on a release build)
    python3 benches/gate.py --slowdown 2    # the Rust engine made 2x slower: must fail

Needs a release build of the extension (`pip install .` builds one; `maturin develop` does
not unless given `--release`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from asyncagents import build_fork_context  # noqa: E402
from floor import build, result_texts, walk_plan, walker  # noqa: E402
from generate import session_objects  # noqa: E402

RATIOS = HERE / "ratios.json"
SHAPES = ("mixed", "tool_ascii", "legacy")
SIZES = (200, 2_000)
ROUNDS = {200: 121, 2_000: 25}
#: measurements per case whose median ratios `--record` writes
RECORD_RUNS = 3
TOLERANCE = 0.25


@dataclass(frozen=True)
class Case:
    """The two ratios of one shape and size."""

    rust_over_floor: float
    reference_over_rust: float


def slowed(call: Callable[[], object], factor: float) -> Callable[[], object]:
    """`call`, then a spin for `factor - 1` times as long: an engine `factor` times slower."""

    def run() -> object:
        start = time.thread_time()
        out = call()
        end = time.thread_time() + (factor - 1) * (time.thread_time() - start)
        while time.thread_time() < end:
            pass
        return out

    return run


def measure(floor: ModuleType, shape: str, size: int, rounds: int, slowdown: float = 1.0) -> Case:
    """The ratios of medians of `rounds` interleaved rounds."""
    messages: list[Any] = session_objects(size, shape)
    plan = walk_plan(messages)
    texts = result_texts(floor, messages, plan)
    rust: Callable[[], object] = partial(build_fork_context, messages)
    calls: dict[str, Callable[[], object]] = {
        "rust": rust if slowdown == 1.0 else slowed(rust, slowdown),
        "reference": partial(build_fork_context, messages, engine="python"),
        "walk": walker(floor, messages, plan),
        "results": partial(floor.read, texts),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            start = time.thread_time()
            call()
            times[name].append(time.thread_time() - start)
    median = {name: statistics.median(spans) for name, spans in times.items()}
    floor_time = median["walk"] + median["results"]
    return Case(median["rust"] / floor_time, median["reference"] / median["rust"])


def key(shape: str, size: int) -> str:
    return f"{shape}/{size}"


def problems(name: str, measured: Case, recorded: Case, tolerance: float) -> list[str]:
    """What is worse than recorded by more than `tolerance` (as a factor), in words."""
    factor = 1.0 + tolerance
    out = []
    if measured.rust_over_floor > recorded.rust_over_floor * factor:
        out.append(
            f"{name}: Rust / floor {measured.rust_over_floor:.2f}x, recorded"
            f" {recorded.rust_over_floor:.2f}x (the limit is"
            f" {recorded.rust_over_floor * factor:.2f}x)"
        )
    if measured.reference_over_rust < recorded.reference_over_rust / factor:
        out.append(
            f"{name}: reference / Rust {measured.reference_over_rust:.2f}x, recorded"
            f" {recorded.reference_over_rust:.2f}x (the limit is"
            f" {recorded.reference_over_rust / factor:.2f}x)"
        )
    return out


def load_recorded(path: Path) -> tuple[float, dict[str, Case]]:
    """The tolerance and the cases of a ratios file."""
    data = json.loads(path.read_text())
    cases = {name: Case(**values) for name, values in data["cases"].items()}
    return float(data["tolerance"]), cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", type=Path, default=RATIOS)
    parser.add_argument("--record", action="store_true", help="write the measured ratios")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--rounds-scale", type=float, default=1.0, help="more or fewer rounds")
    parser.add_argument(
        "--slowdown", type=float, default=1.0, help="make the Rust engine this many times slower"
    )
    args = parser.parse_args(argv)
    floor = build()
    tolerance, recorded = (TOLERANCE, {}) if args.record else load_recorded(args.ratios)

    def run(shape: str, size: int) -> Case:
        rounds = max(3, round(ROUNDS.get(size, 15) * args.rounds_scale))
        return measure(floor, shape, size, rounds, args.slowdown)

    measured: dict[str, Case] = {}
    failed: list[str] = []
    print("| case | Rust / floor | recorded | reference / Rust | recorded | verdict |")
    print("|---|---:|---:|---:|---:|---|")
    for size in args.sizes:
        for shape in args.shapes:
            name = key(shape, size)
            if args.record:
                runs = [run(shape, size) for _ in range(RECORD_RUNS)]
                case = Case(
                    statistics.median(r.rust_over_floor for r in runs),
                    statistics.median(r.reference_over_rust for r in runs),
                )
            else:
                case = run(shape, size)
            verdict = "recorded"
            if not args.record:
                if name not in recorded:
                    raise SystemExit(f"{args.ratios}: no recorded ratios for {name}")
                found = problems(name, case, recorded[name], tolerance)
                if found:  # measured once more: it fails only if it fails again
                    case = run(shape, size)
                    found = problems(name, case, recorded[name], tolerance)
                verdict = "**regression**" if found else "ok"
                failed += found
            measured[name] = case
            was = recorded.get(name)
            print(
                f"| `{name}` | {case.rust_over_floor:.2f}x"
                f" | {f'{was.rust_over_floor:.2f}x' if was else '-'}"
                f" | {case.reference_over_rust:.2f}x"
                f" | {f'{was.reference_over_rust:.2f}x' if was else '-'} | {verdict} |",
                flush=True,
            )
    if args.record:
        data = {
            "tolerance": TOLERANCE,
            "cases": {
                name: {
                    "rust_over_floor": round(case.rust_over_floor, 3),
                    "reference_over_rust": round(case.reference_over_rust, 3),
                }
                for name, case in measured.items()
            },
        }
        args.ratios.write_text(json.dumps(data, indent=2) + "\n")
        print(f"\nwritten to {args.ratios}")
        return 0
    if failed:
        print(
            "\nThe benchmark gate failed (ratios worse than recorded by more than"
            f" {tolerance:.0%}):"
        )
        print("\n".join(f"- {line}" for line in failed))
        return 1
    print(f"\nThe benchmark gate passed: every ratio within {tolerance:.0%} of the recorded one.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
