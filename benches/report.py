"""Run the fork benchmarks (or read pytest-benchmark's JSON) and print a Markdown report:
medians per size, engine and input form, the reference/Rust ratio, 20k/2k scaling, and the peak
memory of the bytes path relative to the input size.

Memory is measured in a fresh subprocess per (size, engine): the peak resident set (``VmHWM`` of
/proc/self/status; ``ru_maxrss`` where there is no /proc) after the input bytes are loaded, and
again after ``build_fork_context``; the difference is the pipeline's own peak. (tracemalloc would
miss the Rust allocations; ``ru_maxrss`` alone would carry over the parent's peak across exec.)

    python benches/report.py                       # run everything (a few minutes)
    python benches/report.py --json bench.json     # report on an earlier --benchmark-json run
    python benches/report.py --smoke --no-memory   # 200 messages only
    python benches/report.py --tasks               # the task manager benchmarks
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

MEMORY_CHILD = """
import resource, sys
from asyncagents import build_fork_context

def peak_kb():
    # VmHWM: this process's peak RSS (reset at exec, unlike ru_maxrss, which a child inherits)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

path, engine = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    data = f.read()
build_fork_context(b"[]", engine=engine)  # loads the engine: a one-time cost
before = peak_kb()
ctx = build_fork_context(data, engine=engine)
after = peak_kb()
print(before, after, len(data), ctx.stats.total_chars)
"""


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


def load_medians(path: Path, cache: str = "hot") -> dict[tuple[int, str, str], float]:
    """Medians by (messages, engine, form) of the hot (`test_fork`) or cold-cache runs."""
    data = json.loads(path.read_text())
    medians = {}
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        if info.get("cache", "hot") != cache:
            continue
        medians[(info["messages"], info["engine"], info["form"])] = bench["stats"]["median"]
    return medians


def input_sizes(path: Path) -> dict[int, int]:
    data = json.loads(path.read_text())
    return {
        b["extra_info"]["messages"]: b["extra_info"]["input_bytes"]
        for b in data["benchmarks"]
        if "input_bytes" in b["extra_info"]
    }


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def timing_table(medians: dict[tuple[int, str, str], float], sizes: dict[int, int]) -> str:
    lines = [
        "| messages | input | form | Rust median | reference median | reference / Rust |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for n in sorted(sizes):
        for form in ("dicts", "bytes"):
            rust = medians.get((n, "rust", form))
            ref = medians.get((n, "python", form))
            if rust is None or ref is None:
                continue
            lines.append(
                f"| {n:,} | {sizes[n] / 1e6:.1f} MB | {form} | {fmt_time(rust)} | {fmt_time(ref)}"
                f" | {ref / rust:.1f}x |"
            )
    return "\n".join(lines)


def scaling_table(
    hot: dict[tuple[int, str, str], float], cold: dict[tuple[int, str, str], float]
) -> str:
    lines = [
        "| engine | form | 20k / 2k, warm cache | 20k / 2k, caches emptied before each call |",
        "|---|---|---:|---:|",
    ]

    def ratio(medians: dict[tuple[int, str, str], float], engine: str, form: str) -> str:
        big, small = medians.get((20_000, engine, form)), medians.get((2_000, engine, form))
        if not big or not small:
            return "-"
        return f"{big / small:.1f}x ({fmt_time(small)} → {fmt_time(big)})"

    for engine in ("rust", "python"):
        for form in ("dicts", "bytes"):
            name = "Rust" if engine == "rust" else "reference"
            lines.append(
                f"| {name} | {form} | {ratio(hot, engine, form)} | {ratio(cold, engine, form)} |"
            )
    return "\n".join(lines)


def memory_table(sizes: list[int]) -> str:
    lines = [
        "| messages | input | engine | peak RSS growth | growth / input |",
        "|---:|---:|---|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"session_{n}.json"
            # generated in a subprocess, so that this process stays small
            subprocess.run(
                [sys.executable, str(HERE / "generate.py"), str(n), "--out", str(path)],
                check=True,
                capture_output=True,
            )
            for engine in ("rust", "python"):
                out = subprocess.run(
                    [sys.executable, "-c", MEMORY_CHILD, str(path), engine],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                ).stdout.split()
                before_kb, after_kb, size = int(out[0]), int(out[1]), int(out[2])
                growth = (after_kb - before_kb) * 1024
                name = "Rust" if engine == "rust" else "reference (json.loads + Python)"
                lines.append(
                    f"| {n:,} | {size / 1e6:.1f} MB | {name} | {growth / 1e6:.1f} MB"
                    f" | {growth / size:.2f}x |"
                )
    return "\n".join(lines)


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
    parser.add_argument(
        "--json", type=Path, help="pytest-benchmark JSON to read instead of running"
    )
    parser.add_argument("--smoke", action="store_true", help="200 messages only")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument(
        "--tasks", action="store_true", help="the task manager benchmarks instead of the fork ones"
    )
    args = parser.parse_args(argv)

    if args.tasks:
        path = args.json or Path(tempfile.mkdtemp()) / "bench.json"
        if not args.json:
            run_benchmarks(path, args.smoke, "test_bench_tasks.py")
        print("## Task manager benchmarks\n")
        print(tasks_tables(path))
        return

    if args.json:
        path = args.json
    else:
        path = Path(tempfile.mkdtemp()) / "bench.json"
        run_benchmarks(path, args.smoke)
    medians = load_medians(path)
    cold = load_medians(path, "cold")
    sizes = input_sizes(path)

    print("## Fork pipeline benchmarks\n")
    print(
        "Median wall time of `build_fork_context` on generated OpenCode sessions "
        '(`benches/generate.py`); reference = `engine="python"` '
        "(from bytes: `json.loads` + the Python pipeline).\n"
    )
    print(timing_table(medians, sizes))
    if (20_000, "rust", "dicts") in medians:
        print("\n### Scaling\n")
        print(
            "Linear is 10x. With a warm cache, repeated calls on the 10 MB session find it in "
            "the cache, while the 100 MB one never fits. The second column empties every cache "
            "level before each call (`test_fork_cold`).\n"
        )
        print(scaling_table(medians, cold))
    if not args.no_memory:
        print("\n### Peak memory, bytes input\n")
        print(
            "Peak RSS growth (`VmHWM`) during the call, in a fresh subprocess per row, measured "
            "after the input bytes are loaded and after one call on an empty session has loaded "
            "the engine's modules (tracemalloc would not see the Rust allocations).\n"
        )
        print(memory_table(sorted(sizes)))


if __name__ == "__main__":
    main()
