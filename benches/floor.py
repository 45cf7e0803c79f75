"""How fast could any engine be from dicts? The reads every engine must make, timed.

`floor.c` is a plain C walk of the caller's dicts that makes only the reads the contract
requires (every head, the bodies from where stage 1 keeps them, each field typed, `state.input`
walked whole), with CPython's own lookups, and nothing else: nothing kept, no search, no
render. Apart, `read` loads every byte of every tool result of those bodies once, as fast as
the memory gives them (an OR of 32-byte loads): each result must be searched for the cleared
marker (one that holds it does not count in the tiers), so every engine reads all of it.

Apart again, `write` makes the two strings every engine must return, the context and the
text (the preamble, then the context): each allocated at its size and its bytes written once,
copied from the result Rust returned. The floor above leaves this out; `Rust / (floor + output)`
shows how much of the distance to it is the output itself.

The reads are timed two ways, the plain C walk and the Rust engine's own walk
(`_core.from_objects`, which reads the same fields and more, but loads the next messages'
objects ahead); the faster of the two is the fastest way we know to make them. So
`reference / (reads + results' bytes)` is the most an engine could reach against the reference
from dicts with a render, a compaction slice and a Python wrapper that cost nothing.

Times on the same list passed again (as the "dicts" columns of docs/benchmarks.md), all engines
round after round in one process. The extension is built on first use with the compiler and
flags CPython was built with (`sysconfig`), into a cache folder.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from asyncagents import _core, build_fork_context
from generate import SHAPES, session_objects

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "floor.c"
#: the key objects `floor.walk` looks up, in the order of its `enum`
KEYS = (
    "info",
    "parts",
    "role",
    "id",
    "parentID",
    "summary",
    "error",
    "name",
    "data",
    "message",
    "type",
    "text",
    "ignored",
    "tool",
    "state",
    "status",
    "input",
    "output",
    "time",
    "compacted",
    "tail_start_id",
)
#: what `floor.walk` is given besides the messages: `bodies_from` and the key objects
Plan = tuple[int, tuple[str, ...]]


def build() -> ModuleType:
    """`floor.c` compiled (once per source and interpreter) and loaded."""
    source = SOURCE.read_bytes()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    tag = hashlib.sha256(source + sys.version.encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"asyncagents-floor-{tag}" / f"floor{suffix}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
        flags = shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC")
        include = sysconfig.get_paths()["include"]
        unfinished = out.with_name(f"{out.name}.{os.getpid()}.partial")  # one per process
        command = [*compiler, *flags, "-O2", "-shared", f"-I{include}", str(SOURCE)]
        subprocess.run([*command, "-o", str(unfinished)], check=True)
        unfinished.replace(out)
    spec = importlib.util.spec_from_file_location("floor", out)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {out}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def document_keys(messages: Sequence[Any]) -> tuple[str, ...]:
    """The key objects of the document (`json.loads` shares one per distinct key), so that the
    floor's lookups hit on identity as the Rust walk's do; an absent key as a new str."""
    found: dict[str, str] = {}
    stack: list[Any] = list(messages)
    while stack:
        value = stack.pop()
        if type(value) is dict:
            for key, item in value.items():
                found.setdefault(key, key)
                stack.append(item)
        elif type(value) is list:
            stack.extend(value)
    return tuple(found.get(name, name) for name in KEYS)


def walk_plan(messages: list[Any]) -> Plan:
    """Where the Rust walk finds the bodies begin, and the document's key objects: what
    `floor.walk` is given."""
    return _core.from_objects(messages).bodies_from, document_keys(messages)


def walker(
    floor: ModuleType, messages: list[Any], plan: Plan | None = None
) -> Callable[[], object]:
    """The plain C walk of `messages`, reading bodies where the Rust walk finds they begin."""
    bodies_from, keys = plan or walk_plan(messages)
    return lambda: floor.walk(messages, bodies_from, keys)


def result_texts(floor: ModuleType, messages: list[Any], plan: Plan | None = None) -> list[str]:
    """The texts of the tool results the walk meets (not those a `state.time.compacted` cleared:
    their text is the marker, and their output is not read)."""
    bodies_from, keys = plan or walk_plan(messages)
    texts: list[str] = []
    floor.walk(messages, bodies_from, keys, texts)
    return texts


def output_texts(messages: list[Any]) -> list[str]:
    """The strings a call returns that hold the context: `context` and `text`."""
    made = build_fork_context(messages)
    return [made.context, made.text]


def measure(
    floor: ModuleType,
    shape: str,
    size: int,
    rounds: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median ms of each, round after round on the same list. In a round each makes an
    untimed call, then a timed one, so that every timed call follows one of its own kind
    (as in a benchmark of it alone) and not one that left other objects in the caches."""
    messages = session_objects(size, shape)
    plan = walk_plan(messages)
    calls: dict[str, Callable[[], object]] = {
        "reference": lambda: build_fork_context(messages, engine="python"),
        "rust": lambda: build_fork_context(messages),
        "walk": lambda: _core.from_objects(messages),
        "floor": walker(floor, messages, plan),
        "results": partial(floor.read, result_texts(floor, messages, plan)),
        "output": partial(floor.write, output_texts(messages)),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            start = clock()
            call()
            times[name].append(clock() - start)
    return {name: statistics.median(spans) * 1e3 for name, spans in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[200, 2_000])
    parser.add_argument(
        "--cpu", action="store_true", help="the thread's CPU time, not wall time (a shared machine)"
    )
    args = parser.parse_args(argv)
    clock = time.thread_time if args.cpu else time.perf_counter
    floor = build()
    print(
        "| shape | messages | reference | Rust | Rust walk | C walk | results' bytes"
        " | reference / Rust | reference / reads | reference / (reads + results' bytes)"
        " | Rust / (reads + results' bytes) | output | Rust / (reads + results' bytes + output) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        for shape in args.shapes:
            ms = measure(floor, shape, size, 60 if size <= 200 else 20, clock)
            reads = min(ms["walk"], ms["floor"])
            results = ms["results"]
            cells = " | ".join(
                f"{ms[name]:.3f} ms" for name in ("reference", "rust", "walk", "floor")
            )
            print(
                f"| `{shape}` | {size:,} | {cells} | {results:.3f} ms"
                f" | {ms['reference'] / ms['rust']:.1f}x | {ms['reference'] / reads:.1f}x"
                f" | {ms['reference'] / (reads + results):.1f}x"
                f" | {ms['rust'] / (reads + results):.2f}x | {ms['output']:.3f} ms"
                f" | {ms['rust'] / (reads + results + ms['output']):.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
