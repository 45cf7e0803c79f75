"""pytest-benchmark groups for the fork pipeline: 200 / 2,000 / 20,000 messages (~1/10/100 MB),
each engine from dicts and from JSON bytes.

``engine="python"`` from bytes is ``json.loads`` + the Python pipeline, the reference a plain
Python implementation would run. ``ASYNCAGENTS_BENCH_SMOKE=1`` runs only 200 messages, 2 rounds.

`test_fork_cold` times the same calls with every cache level emptied before each round (an
untimed write over a buffer far larger than the last-level cache), as a server meets a fork
between other work. Repeated rounds on a 10 MB session otherwise find it in the cache, while a
100 MB one never fits, which skews the 20k/2k ratio of `test_fork`.

    python -m pytest benches --benchmark-enable -p no:cacheprovider
    python benches/report.py            # runs them and prints the Markdown table
"""

from __future__ import annotations

import os

import pytest
from asyncagents import build_fork_context
from generate import session_bytes, session_objects

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
SIZES = [200] if SMOKE else [200, 2_000, 20_000]
ROUNDS = {200: 30, 2_000: 15, 20_000: 5}


@pytest.mark.parametrize("form", ["dicts", "bytes"])
@pytest.mark.parametrize("engine", ["rust", "python"])
@pytest.mark.parametrize("messages", SIZES)
def test_fork(benchmark, messages, engine, form):
    data = session_bytes(messages) if form == "bytes" else session_objects(messages)
    benchmark.group = f"fork-{messages}"
    benchmark.extra_info.update(
        {
            "messages": messages,
            "engine": engine,
            "form": form,
            "input_bytes": len(session_bytes(messages)),
        }
    )
    rounds = 2 if SMOKE else ROUNDS[messages]
    ctx = benchmark.pedantic(
        build_fork_context,
        args=(data,),
        kwargs={"engine": engine},
        rounds=rounds,
        iterations=1,
        warmup_rounds=0 if SMOKE or messages == 20_000 else 1,
    )
    assert ctx.stats.original_count == messages
    assert ctx.stats.compaction_detected
    assert 0 < ctx.stats.total_chars <= 200_000


#: written over before each cold round: far larger than any last-level cache
EVICT_BYTES = 32_000_000 if SMOKE else 512_000_000
COLD_SIZES = [200] if SMOKE else [2_000, 20_000]


@pytest.fixture(scope="module")
def evict():
    junk = bytearray(EVICT_BYTES)
    stride = b"\x01" * (EVICT_BYTES // 64)

    def run():
        junk[::64] = stride

    return run


@pytest.mark.parametrize("form", ["dicts", "bytes"])
@pytest.mark.parametrize("engine", ["rust", "python"])
@pytest.mark.parametrize("messages", COLD_SIZES)
def test_fork_cold(benchmark, evict, messages, engine, form):
    data = session_bytes(messages) if form == "bytes" else session_objects(messages)
    benchmark.group = f"fork-cold-{messages}"
    benchmark.extra_info.update(
        {"messages": messages, "engine": engine, "form": form, "cache": "cold"}
    )
    rounds = 2 if SMOKE else ROUNDS[messages]
    ctx = benchmark.pedantic(
        build_fork_context,
        args=(data,),
        kwargs={"engine": engine},
        setup=evict,
        rounds=rounds,
        iterations=1,
    )
    assert ctx.stats.original_count == messages
