"""pytest-benchmark groups of the fork pipeline over every session shape of `generate.SHAPES`, at
200 / 2,000 / 20,000 messages, each engine from dicts and from JSON bytes.

- ``fork-{shape}-{n}``: `build_fork_context` on the Rust engine and on the reference
  (``engine="python"``; from bytes that is ``json.loads`` + the Python pipeline), beside the plain
  yardstick (`plain_fork.py`), from dicts and from bytes; ten untimed calls first (`WARMUP`),
  so that the group measures the steady state of a session passed again.
- ``fork-cold-{shape}``: the Rust engine at 2,000 and 20,000 messages with every cache level
  emptied before each call (an untimed write over a buffer far larger than the last-level
  cache), as a server meets a fork between other work: the 20k/2k scaling target.
- ``fork-fresh-{shape}-{n}``: from dicts, each call on a list of dicts parsed for it (untimed
  ``json.loads`` before each round), as a server gets the messages of each fork: nothing the
  previous call left on the objects (CPython caches a str's UTF-8 form once asked) helps.
- ``fork-memory-{shape}``: peak RSS growth of the Rust bytes path in a fresh subprocess
  (``VmHWM``), recorded in ``extra_info`` (its time is that of the subprocess, not a result).
- ``fork-fixed``: a 10-message session, the fixed cost of one call.
- ``fork-long-inputs``: 200 ``write`` calls whose ``content`` is 21 KB of escaped lines (every
  other one with non-ASCII text): previews of long parameters.

Cases run shape by shape and size by size, so each generated session is built once per process.
``ASYNCAGENTS_BENCH_SMOKE=1`` runs 200 messages only, one or two rounds (CI).

    python -m pytest benches/test_bench_fork.py -q -p no:cacheprovider --benchmark-enable \\
        --benchmark-json=fork-bench.json
    python benches/report.py fork-bench.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from asyncagents import build_fork_context
from generate import SHAPES, session_bytes, session_objects
from plain_fork import plain_fork

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
SIZES = [200] if SMOKE else [200, 2_000, 20_000]
COLD_SIZES = [200] if SMOKE else [2_000, 20_000]
FRESH_SIZES = [200] if SMOKE else [200, 2_000]
#: rounds on fresh objects per size: the Rust engine, the Python ones
FRESH_ROUNDS = {200: (30, 15), 2_000: (12, 6)}
#: rounds per size: the Rust engine, the Python ones (reference and yardstick), cold Rust
ROUNDS = {200: (50, 20, 0), 2_000: (20, 10, 10), 20_000: (5, 3, 5)}
ENGINES = ("rust", "python", "plain")
FORMS = ("dicts", "bytes")
#: calls before the timed rounds of the hot group (200 and 2,000 messages), every engine
WARMUP = 10
#: written over before each cold round: far larger than any last-level cache
EVICT_BYTES = 32_000_000 if SMOKE else 512_000_000
HERE = Path(__file__).resolve().parent

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

with open(sys.argv[1], "rb") as f:
    data = f.read()
build_fork_context(b"[]")  # loads the engine: a one-time cost
before = peak_kb()
ctx = build_fork_context(data)
print(before, peak_kb(), ctx.stats.total_chars)
"""


def _cases() -> list[Any]:
    cases = []
    for shape in SHAPES:
        for n in SIZES:
            for form in FORMS:
                for engine in ENGINES:
                    cases.append(
                        pytest.param(
                            shape, n, engine, form, "hot", id=f"{shape}-{n}-{engine}-{form}"
                        )
                    )
            if n in FRESH_SIZES:
                for engine in ENGINES:
                    cases.append(
                        pytest.param(
                            shape, n, engine, "dicts", "fresh", id=f"{shape}-{n}-{engine}-fresh"
                        )
                    )
            if n in COLD_SIZES:
                for form in FORMS:
                    cases.append(
                        pytest.param(
                            shape, n, "rust", form, "cold", id=f"{shape}-{n}-rust-{form}-cold"
                        )
                    )
            cases.append(
                pytest.param(shape, n, "rust", "bytes", "memory", id=f"{shape}-{n}-memory")
            )
    return cases


def _run(engine: str, data: Any) -> tuple[str, int]:
    """The injected text and the original message count, from any of the three engines."""
    if engine == "plain":
        text, stats = plain_fork(data)
        return text, stats["original_count"]
    ctx = build_fork_context(data, engine=engine)
    return ctx.text, ctx.stats.original_count


@pytest.fixture(scope="module")
def evict():
    junk = bytearray(EVICT_BYTES)
    stride = b"\x01" * (EVICT_BYTES // 64)

    def run() -> None:
        junk[::64] = stride

    return run


@pytest.mark.parametrize(("shape", "messages", "engine", "form", "cache"), _cases())
def test_fork(benchmark, evict, shape, messages, engine, form, cache):
    data = session_bytes(messages, shape) if form == "bytes" else session_objects(messages, shape)
    info = {
        "shape": shape,
        "messages": messages,
        "engine": engine,
        "form": form,
        "cache": cache,
        "input_bytes": len(session_bytes(messages, shape)),
    }
    benchmark.extra_info.update(info)
    if cache == "memory":
        benchmark.group = f"fork-memory-{shape}"
        _measure_memory(benchmark, session_bytes(messages, shape))
        return
    rust_rounds, python_rounds, cold_rounds = ROUNDS[messages]
    if cache == "fresh":
        benchmark.group = f"fork-fresh-{shape}-{messages}"
        raw = session_bytes(messages, shape)
        rust_fresh, python_fresh = FRESH_ROUNDS[messages]
        rounds = 2 if SMOKE else rust_fresh if engine == "rust" else python_fresh
        text, count = benchmark.pedantic(
            _run,
            setup=lambda: ((engine, json.loads(raw)), {}),
            rounds=rounds,
            iterations=1,
        )
    elif cache == "cold":
        benchmark.group = f"fork-cold-{shape}"
        rounds = 2 if SMOKE else cold_rounds
        text, count = benchmark.pedantic(
            _run, args=(engine, data), setup=evict, rounds=rounds, iterations=1
        )
    else:
        benchmark.group = f"fork-{shape}-{messages}"
        rounds = rust_rounds if engine == "rust" else python_rounds
        rounds = 2 if SMOKE else rounds
        # steady state: on the VMs this ran on, objects just parsed read slower for the first
        # passes over them (a 2,000-message `huge_output` from 2.9 ms down to 0.86), for every
        # engine; the fresh group measures first calls
        warmup = 0 if SMOKE or messages == 20_000 else WARMUP
        text, count = benchmark.pedantic(
            _run, args=(engine, data), rounds=rounds, iterations=1, warmup_rounds=warmup
        )
    assert count == messages
    assert text.startswith("You are working with forked context")
    assert len(text) < 201_000


def _measure_memory(benchmark: Any, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.json"
        path.write_bytes(data)

        def child() -> list[str]:
            return subprocess.run(
                [sys.executable, "-c", MEMORY_CHILD, str(path)],
                check=True,
                capture_output=True,
                text=True,
                env=os.environ,
            ).stdout.split()

        out = benchmark.pedantic(child, rounds=1, iterations=1)
    before_kb, after_kb = int(out[0]), int(out[1])
    benchmark.extra_info["peak_growth_bytes"] = (after_kb - before_kb) * 1024
    assert int(out[2]) > 0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_fork_fixed_cost(benchmark, engine, form):
    """A 10-message session: what one call costs besides the work on the messages."""
    data = session_bytes(10, "mixed") if form == "bytes" else session_objects(10, "mixed")
    benchmark.group = "fork-fixed"
    benchmark.extra_info.update({"shape": "mixed", "messages": 10, "engine": engine, "form": form})
    text, count = benchmark.pedantic(
        _run, args=(engine, data), rounds=20 if SMOKE else 2_000, iterations=1, warmup_rounds=1
    )
    assert count == 10 and text


def long_inputs_session() -> list[dict[str, Any]]:
    """200 `write` calls with 21 KB contents, as an agent writing files leaves them."""
    messages = []
    for i in range(200):
        content = f"line {i} of the file with some text\n" * 600 + ("é漢" * 50 if i % 2 else "")
        state = {"status": "completed", "input": {"filePath": "/w/f.py", "content": content}}
        messages.append(
            {
                "info": {"id": f"msg_{i:04d}", "role": "assistant"},
                "parts": [{"type": "tool", "tool": "write", "state": {**state, "output": "ok"}}],
            }
        )
    return messages


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_fork_long_inputs(benchmark, engine, form):
    """Long tool parameters: a preview shows at most 500 characters of each."""
    messages = long_inputs_session()
    data = json.dumps(messages).encode() if form == "bytes" else messages
    benchmark.group = "fork-long-inputs"
    benchmark.extra_info.update({"messages": 200, "engine": engine, "form": form})
    text, count = benchmark.pedantic(
        _run, args=(engine, data), rounds=3 if SMOKE else 30, iterations=1, warmup_rounds=1
    )
    assert count == 200 and "[Tool: write]" in text
