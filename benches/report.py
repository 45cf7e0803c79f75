"""Markdown report of the fork benchmarks (`test_bench_fork.py`) from pytest-benchmark's JSON:
every session shape at 200 / 2,000 / 20,000 messages, Rust against the reference
(``engine="python"``) from dicts and from JSON bytes, the plain yardstick, and each target of
issue 8 with whether it is met. Without a JSON file it runs the benchmarks first.

    python -m pytest benches/test_bench_fork.py -q -p no:cacheprovider --benchmark-enable \
        --benchmark-json=fork-bench.json
    python benches/report.py fork-bench.json     # the tables of docs/benchmarks.md
    python benches/report.py                     # run, then report (about 12 minutes)
    python benches/report.py --tasks tasks.json  # the task manager benchmarks instead
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPE_ORDER = (
    "mixed",
    "text_heavy",
    "tool_ascii",
    "tool_errors",
    "non_ascii",
    "small_parts",
    "huge_output",
    "deep_compaction",
    "legacy",
)
SIZES = (200, 2_000, 20_000)
BENCH_COMMAND = (
    "python3 -m pytest benches/test_bench_fork.py -q -p no:cacheprovider"
    " --benchmark-enable --benchmark-json=fork-bench.json"
)

#: issue 8's targets
DICTS_RATIO = 15.0
BYTES_RATIO = 10.0
SCALING = 12.0
MEMORY = 1.5
SMALL_DICTS_S = 0.12e-3


def run_benchmarks(out: Path, smoke: bool, module: str = "test_bench_fork.py") -> None:
    env = dict(os.environ)
    if smoke:
        env["ASYNCAGENTS_BENCH_SMOKE"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE / module),
        "-q",
        "-p",
        "no:cacheprovider",
        "--benchmark-enable",
        f"--benchmark-json={out}",
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)


class Results:
    """Medians (s) and memory of one `test_bench_fork.py` JSON run, by case."""

    def __init__(self, benchmarks: list[dict[str, Any]]) -> None:
        self.median: dict[tuple[str, int, str, str, str], float] = {}
        self.growth: dict[tuple[str, int], float] = {}
        self.input_bytes: dict[tuple[str, int], int] = {}
        for bench in benchmarks:
            info = bench["extra_info"]
            if "shape" not in info:
                continue
            shape, n = info["shape"], info["messages"]
            cache = info.get("cache", "hot")
            if "input_bytes" in info:
                self.input_bytes[shape, n] = info["input_bytes"]
            if cache == "memory":
                self.growth[shape, n] = info["peak_growth_bytes"] / info["input_bytes"]
                continue
            key = (shape, n, info["engine"], info["form"], cache)
            self.median[key] = bench["stats"]["median"]

    def get(self, shape: str, n: int, engine: str, form: str, cache: str = "hot") -> float | None:
        return self.median.get((shape, n, engine, form, cache))

    def shapes(self) -> list[str]:
        found = {key[0] for key in self.input_bytes}
        return [s for s in SHAPE_ORDER if s in found] + sorted(found - set(SHAPE_ORDER))


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def verdict(value: float | None, ok: Callable[[float], bool], text: str) -> str:
    if value is None:
        return "not measured"
    return f"**met** ({text})" if ok(value) else f"**not met** ({text})"


def against_reference(r: Results, shape: str, n: int, form: str, cache: str = "hot") -> list[str]:
    """Cells: Rust's median, the reference's, and the reference over Rust."""
    rust, ref = r.get(shape, n, "rust", form, cache), r.get(shape, n, "python", form, cache)
    return [fmt_time(rust), fmt_time(ref), fmt_ratio(ratio(ref, rust))]


def timing_table(r: Results) -> str:
    lines = [
        "| shape | messages | input | Rust, dicts | reference, dicts | ref / Rust"
        " | Rust, bytes | reference, bytes | ref / Rust | plain, dicts | plain, bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in r.shapes():
        for n in SIZES:
            if (shape, n) not in r.input_bytes:
                continue
            row = [f"`{shape}`", f"{n:,}", f"{r.input_bytes[shape, n] / 1e6:.1f} MB"]
            for form in ("dicts", "bytes"):
                row += against_reference(r, shape, n, form)
            row += [fmt_time(r.get(shape, n, "plain", form)) for form in ("dicts", "bytes")]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def fresh_table(r: Results) -> str:
    lines = [
        "| shape | messages | Rust | reference | ref / Rust | plain |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shape in r.shapes():
        for n in SIZES:
            cells = against_reference(r, shape, n, "dicts", "fresh")
            if cells[:2] == ["-", "-"]:
                continue
            cells.append(fmt_time(r.get(shape, n, "plain", "dicts", "fresh")))
            lines.append(f"| `{shape}` | {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(r: Results) -> str:
    lines = [
        f"| shape | dicts, 2,000: Rust ≥ {DICTS_RATIO:.0f}x reference"
        f" | the same, fresh dicts for each call"
        f" | bytes, 2,000: Rust ≥ {BYTES_RATIO:.0f}x json.loads + reference"
        f" | Rust 20k / 2k ≤ {SCALING:.0f}x, caches emptied (dicts; bytes)"
        f" | bytes path peak memory ≤ {MEMORY}x input (2,000; 20,000)"
        " | Rust from dicts, 200 messages ≤ 0.12 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in r.shapes():
        cells = [f"`{shape}`"]
        for form, target, cache in (
            ("dicts", DICTS_RATIO, "hot"),
            ("dicts", DICTS_RATIO, "fresh"),
            ("bytes", BYTES_RATIO, "hot"),
        ):
            value = ratio(
                r.get(shape, 2_000, "python", form, cache), r.get(shape, 2_000, "rust", form, cache)
            )
            cells.append(verdict(value, lambda v, t=target: v >= t, fmt_ratio(value)))
        scaling = [
            ratio(
                r.get(shape, 20_000, "rust", form, "cold"),
                r.get(shape, 2_000, "rust", form, "cold"),
            )
            for form in ("dicts", "bytes")
        ]
        worst = max(scaling) if None not in scaling else None  # type: ignore[type-var]
        cells.append(verdict(worst, lambda v: v <= SCALING, "; ".join(map(fmt_ratio, scaling))))
        growth = [r.growth.get((shape, n)) for n in (2_000, 20_000)]
        worst = max(growth) if None not in growth else None  # type: ignore[type-var]
        text = "; ".join("-" if g is None else f"{g:.2f}x" for g in growth)
        cells.append(verdict(worst, lambda v: v <= MEMORY, text))
        small = r.get(shape, 200, "rust", "dicts")
        cells.append(verdict(small, lambda v: v <= SMALL_DICTS_S, fmt_time(small)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def yardstick_table(r: Results) -> str:
    lines = [
        "| shape | messages | reference / plain, dicts | reference / plain, bytes |",
        "|---|---:|---:|---:|",
    ]
    for shape in r.shapes():
        for n in SIZES:
            cells = [
                fmt_ratio(ratio(r.get(shape, n, "python", form), r.get(shape, n, "plain", form)))
                for form in ("dicts", "bytes")
            ]
            if cells != ["-", "-"]:
                lines.append(f"| `{shape}` | {n:,} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def group_line(benchmarks: list[dict[str, Any]], group: str, title: str) -> str:
    """One benchmark group's medians per engine and form, as a sentence."""
    cost: dict[tuple[str, str], float] = {}
    for bench in benchmarks:
        info = bench["extra_info"]
        if bench.get("group") == group:
            cost[info["engine"], info["form"]] = bench["stats"]["median"]
    if not cost:
        return ""
    parts = [
        f"{name} {fmt_time(cost.get((engine, 'dicts')))} from dicts,"
        f" {fmt_time(cost.get((engine, 'bytes')))} from bytes"
        for engine, name in (("rust", "Rust"), ("python", "reference"), ("plain", "plain"))
    ]
    return f"{title} (`{group}`): " + "; ".join(parts) + "."


def fork_report(path: Path) -> str:
    benchmarks = json.loads(path.read_text())["benchmarks"]
    r = Results(benchmarks)
    out = [
        "### Fork pipeline: every shape\n",
        "Median wall time of `build_fork_context` on the sessions of `benches/generate.py`."
        ' Reference = `engine="python"` (from bytes: `json.loads` + the Python pipeline);'
        " plain = `benches/plain_fork.py`, a plain single-pass yardstick with no input checks."
        f" Produced by `{BENCH_COMMAND}` and `python3 benches/report.py fork-bench.json`.\n",
        timing_table(r),
        "\n### Fresh objects\n",
        "From dicts, each call on a list of dicts parsed for it (`fork-fresh`), as a server"
        " gets the messages of each fork.\n",
        fresh_table(r),
        "\n### Targets\n",
        targets_table(r),
    ]
    for group, title in (
        ("fork-fixed", "Fixed cost, a 10-message session"),
        ("fork-long-inputs", "200 `write` calls with 21 KB contents"),
    ):
        line = group_line(benchmarks, group, title)
        if line:
            out.append("\n" + line)
    out += ["\n### Reference against the plain yardstick (≤ 1.0x: the reference is as fast)\n"]
    out.append(yardstick_table(r))
    return "\n".join(out)


def tasks_tables(path: Path) -> str:
    """Launch latencies and completions per second from a `test_bench_tasks.py` JSON run."""
    data = json.loads(path.read_text())
    out = []
    for backend, title in (("in-process", "In-process backend"), ("opencode", "opencode serve")):
        benches = [b for b in data["benchmarks"] if b["extra_info"].get("backend") == backend]
        if not benches:
            continue
        lines = [
            f"### {title}\n",
            "| launch | measured until | median | vs. plain launch |",
            "|---|---|---:|---:|",
        ]
        plain: dict[str, float] = {}
        rows = []
        completions = ""
        for bench in benches:
            info, median = bench["extra_info"], bench["stats"]["median"]
            if "concurrent" in info:
                n = info["concurrent"]
                completions = (
                    f"{n} concurrent tasks (4 parents), from the first `task()` until every task "
                    f"is completed and its notice delivered: median {fmt_time(median)}, "
                    f"**{n / median:,.0f} completions/s**."
                )
                continue
            until = "`task()` returned" if info["until"] == "returned" else "child prompted"
            if info["fork"]:
                engine = "Rust" if info["engine"] == "rust" else "reference"
                what = f"fork, {info['parent_messages']:,}-message parent, {engine} engine"
            else:
                what = "plain"
                plain[until] = median
            rows.append((until, what, median))
        for until, what, median in sorted(rows, key=lambda r: r[0] != "`task()` returned"):
            base = plain.get(until)
            ratio = f"{median / base:.1f}x" if base else ""
            lines.append(f"| {what} | {until} | {fmt_time(median)} | {ratio} |")
        out.append("\n".join(lines) + "\n\n" + completions)
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Markdown report of the fork benchmarks")
    parser.add_argument("json", nargs="?", type=Path, help="pytest-benchmark JSON to report on")
    parser.add_argument("--smoke", action="store_true", help="run 200 messages only")
    parser.add_argument(
        "--tasks", action="store_true", help="the task manager benchmarks instead of the fork ones"
    )
    args = parser.parse_args(argv)
    module = "test_bench_tasks.py" if args.tasks else "test_bench_fork.py"
    path = args.json
    if path is None:
        path = Path(tempfile.mkdtemp()) / "bench.json"
        run_benchmarks(path, args.smoke, module)
    if args.tasks:
        print("## Task manager benchmarks\n")
        print(tasks_tables(path))
        return
    print(f"To produce the JSON: `{BENCH_COMMAND}`\n")
    print(fork_report(path))


if __name__ == "__main__":
    main()
