"""The benchmark gate (`gate.py`): what it calls a regression, that the recorded ratios cover
every case it measures, and that it fails, run for real, on a Rust engine made slower. Runs in
CI's smoke step with the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gate import RATIOS, SHAPES, SIZES, TOLERANCE, Case, key, load_recorded, problems, slowed

HERE = Path(__file__).resolve().parent


def test_a_ratio_worse_by_more_than_the_tolerance_is_named():
    recorded = Case(rust_over_floor=2.0, reference_over_rust=10.0)
    assert problems("mixed/200", Case(2.5, 8.0), recorded, 0.25) == []
    assert problems("mixed/200", Case(1.0, 30.0), recorded, 0.25) == []
    assert problems("mixed/200", Case(2.51, 7.99), recorded, 0.25) == [
        "mixed/200: Rust / floor 2.51x, recorded 2.00x (the limit is 2.50x)",
        "mixed/200: reference / Rust 7.99x, recorded 10.00x (the limit is 8.00x)",
    ]
    assert problems("legacy/2000", Case(2.0, 7.9), recorded, 0.25) == [
        "legacy/2000: reference / Rust 7.90x, recorded 10.00x (the limit is 8.00x)",
    ]


def test_the_recorded_ratios_cover_every_case_gated():
    tolerance, cases = load_recorded(RATIOS)
    assert tolerance == TOLERANCE == 0.25
    assert sorted(cases) == sorted(key(shape, size) for shape in SHAPES for size in SIZES)
    for case in cases.values():
        assert case.rust_over_floor > 1.0
        assert case.reference_over_rust > 1.0


def test_the_slowdown_wrapper_takes_about_factor_times_as_long():
    def work() -> int:
        return sum(range(200_000))

    start = time.thread_time()
    work()
    once = time.thread_time() - start
    start = time.thread_time()
    assert slowed(work, 3.0)() == work()
    thrice = time.thread_time() - start - once  # the second `work()` above
    assert 2.0 * once < thrice


def test_the_gate_fails_on_a_slowed_engine():
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "gate.py"),
            "--slowdown",
            "2",
            "--shapes",
            "mixed",
            "--sizes",
            "200",
            "--rounds-scale",
            "0.25",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "| `mixed/200` |" in done.stdout
    assert "**regression** |" in done.stdout
    assert "The benchmark gate failed (ratios worse than recorded by more than 25%):" in done.stdout
    assert "- mixed/200: Rust / floor " in done.stdout
    assert "- mixed/200: reference / Rust " in done.stdout
