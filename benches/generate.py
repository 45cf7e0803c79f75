"""Deterministic generator of OpenCode sessions of many shapes for the fork pipeline benchmarks.

Messages follow shared/fixtures/opencode/FORMAT.md (opencode 1.18): a user prompt, then one
assistant message per step (step-start, sometimes reasoning, tool parts with their real state and
metadata, step-finish), and a final text step. Each shape stresses one side of the pipeline:

- ``mixed``: bash/read/grep/edit calls with 0.04-58 KB outputs (a few non-ASCII words), failed
  calls, pruned outputs (``state.time.compacted``), one compaction with ``tail_start_id`` at 60 %
- ``text_heavy``: long user and assistant texts, a tool call in one step of ten
- ``tool_ascii``: 1-2 read/grep/glob/list/webfetch calls per step, 0.3-20 KB ASCII outputs without
  any error word (head-only cuts after a full pattern search)
- ``tool_errors``: the same with error words on every line of every output
- ``non_ascii``: CJK, emoji and combining marks in texts, outputs and parameters
- ``small_parts``: 20+ parts per assistant message (step, reasoning, text, many small calls,
  patch, file)
- ``huge_output``: small outputs, and one 5 MB output three messages before the end
- ``deep_compaction``: five complete compactions and an incomplete one at the end
- ``legacy``: the older shape, a ``tool`` part with ``state.input`` and no ``status``, its
  output in the ``tool_result`` part that follows

The same (shape, size, seed) always gives the same bytes.

    python benches/generate.py 2000 --shape tool_ascii --out /tmp/session.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

SESSION = "ses_bench000000000000000000"
T0 = 1_795_000_000_000
MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4"}
CWD = "/home/dev/proj"
ERROR_WORDS = ("error", "Error", "ERROR", "failed", "FAILED", "exception", "traceback")

_WORDS = (
    "the config loader reads every field before the worker pool starts and the retry policy "
    "backs off with jitter so that timeouts in the upstream service do not cascade into the "
    "scheduler queue while the cache is warm"
).split()
_UNICODE = ["café", "naïve", "日本語", "données", "😀", "Größe", "\u2139\ufe0f", "→", "e\u0301"]
_WIDE_WORDS = [
    "配置加载器",
    "读取每个字段",
    "ワーカープール",
    "再試行ポリシー",
    "キャッシュ",
    "스케줄러 대기열",
    "😀",
    "🚀🔥",
    "👨\u200d👩\u200d👧",
    "e\u0301te\u0301",
    "n\u0303o",
    "Ω≈ç√∫",
    "→",
    "données",
]


def _line(rng: random.Random, i: int, kind: str) -> str:
    """One line of tool output; `kind` is "mixed", "ascii", "errors" or "wide"."""
    k = i % 6
    if kind == "wide":
        words = " ".join(rng.choices(_WIDE_WORDS, k=rng.randint(3, 10)))
        return f"{i:05d} {words}" if k % 2 else f"src/模块_{i % 97}.py:{i}: {words}"
    if k == 0:
        line = f"    def compute_{i}(self, x: int, y: int = 0) -> int:"
    elif k == 1:
        line = f"-rw-r--r-- 1 dev dev {rng.randint(100, 99_999):>6} Nov 22 13:{i % 60:02d} f{i}.py"
    elif k == 2:
        line = f"2026-11-22T13:{i % 60:02d}:{i % 59:02d}Z INFO worker[{i % 8}] handled {i} jobs"
    elif k == 3:
        word = rng.choice(_UNICODE) if kind == "mixed" else "plain"
        line = f"{i},{word},{rng.random():.6f},{rng.randint(0, 10**6)}"
    elif k == 4:
        line = " ".join(rng.choices(_WORDS, k=rng.randint(4, 14)))
    else:
        line = f"src/module_{i % 97}.py:{i}:        return self._cache.get(key_{i})"
    if kind == "errors":
        line += f"  # {ERROR_WORDS[i % len(ERROR_WORDS)]}: check {i} failed"
    return line


@lru_cache(maxsize=4)
def corpus(kind: str) -> str:
    """About 2 MB of tool output of one kind; outputs are slices of it."""
    rng = random.Random(f"corpus-{kind}")
    text = "\n".join(_line(rng, i, kind) for i in range(30_000))
    if kind == "ascii":
        assert text.isascii() and not any(word in text for word in ERROR_WORDS)
    return text


class _Gen:
    """Builds messages with ids, times and the fields opencode 1.18 writes."""

    def __init__(self, seed: int, kind: str) -> None:
        self.rng = random.Random(seed)
        self.kind = kind
        self.corpus = corpus(kind)
        self.clock = T0
        self.counter = 0

    def tick(self, ms: int = 37) -> int:
        self.clock += ms
        return self.clock

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter:012x}bench{self.counter % 997:03d}"

    def slice(self, size: int) -> str:
        size = min(size, len(self.corpus) - 2)
        start = self.rng.randrange(0, len(self.corpus) - size - 1)
        return self.corpus[start : start + size]

    def prose(self, words: int) -> str:
        if self.kind == "wide":
            return " ".join(self.rng.choices(_WIDE_WORDS + _WORDS, k=words))
        text = " ".join(self.rng.choices(_WORDS, k=words))
        if self.kind == "mixed" and self.rng.random() < 0.3:
            text += " " + self.rng.choice(_UNICODE)
        return text

    def part(self, mid: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.new_id("prt"), "sessionID": SESSION, "messageID": mid, **body}

    def user(
        self, text: str | None = None, parts: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        mid = self.new_id("msg")
        info = {
            "id": mid,
            "sessionID": SESSION,
            "role": "user",
            "time": {"created": self.tick()},
            "agent": "build",
            "model": MODEL,
        }
        body = parts if parts is not None else [{"type": "text", "text": text or self.prose(30)}]
        return {"info": info, "parts": [self.part(mid, p) for p in body]}

    def assistant(
        self, parent: str, finish: str, parts: list[dict[str, Any]], mid: str, **extra: Any
    ) -> dict[str, Any]:
        created = self.tick()
        info = {
            "id": mid,
            "sessionID": SESSION,
            "role": "assistant",
            "parentID": parent,
            "time": {"created": created, "completed": self.tick(900)},
            "modelID": MODEL["modelID"],
            "providerID": MODEL["providerID"],
            "mode": "build",
            "agent": "build",
            "path": {"cwd": CWD, "root": CWD},
            "cost": 0.0123,
            "tokens": {
                "total": 18_000,
                "input": 17_000,
                "output": 900,
                "reasoning": 100,
                "cache": {"read": 16_000, "write": 0},
            },
            "finish": finish,
            **extra,
        }
        return {"info": info, "parts": parts}

    def tool_state(
        self, inp: dict[str, Any], out: str, meta: dict[str, Any], title: str, compacted: bool
    ) -> dict[str, Any]:
        start = self.tick(5)
        if self.kind == "mixed" and self.rng.random() < 0.05:
            return {
                "status": "error",
                "input": inp,
                "error": f"File not found: {CWD}/does/not/exist_{self.counter}.txt",
                "time": {"start": start, "end": self.tick(3)},
            }
        if self.kind == "errors" and self.rng.random() < 0.1:
            return {
                "status": "error",
                "input": inp,
                "error": "Error: command failed with exit code 1\n" + out,
                "time": {"start": start, "end": self.tick(3)},
            }
        state = {
            "status": "completed",
            "input": inp,
            "output": out,
            "title": title,
            "metadata": meta,
            "time": {"start": start, "end": self.tick(40)},
        }
        if compacted:
            state["time"]["compacted"] = T0 + 9_999_999
        return state

    def tool(self, mid: str, compacted: bool, names: tuple[str, ...], size: int) -> dict[str, Any]:
        """A completed (sometimes failed) call of one of `names` with an output of `size`."""
        kind = self.rng.choice(names)
        if kind == "bash":
            cmd = self.rng.choice(["ls -la src", "pytest -x -q", "git diff --stat", "seq 1 3000"])
            inp: dict[str, Any] = {"command": cmd, "description": self.prose(6)}
            out = self.slice(size)
            if self.kind == "mixed" and self.rng.random() < 0.1:
                out += "\nError: process exited with code 2\nTraceback (most recent call last):"
            meta: dict[str, Any] = {"output": out[:2000], "exit": 0, "description": self.prose(6)}
        elif kind == "read":
            path = f"{CWD}/src/module_{self.rng.randint(0, 96)}.py"
            if self.kind == "wide":
                path = f"{CWD}/源代码/模块_{self.rng.randint(0, 96)}.py"
            inp = {"filePath": path, "limit": 2000}
            body = self.slice(size)
            out = f"<path>{path}</path>\n<type>file</type>\n<content>\n{body}\n</content>"
            meta = {"preview": body[:400], "truncated": False, "loaded": []}
        elif kind == "grep":
            inp = {"pattern": r"def compute_\d+", "path": CWD, "include": "*.py"}
            out = f"Found {self.rng.randint(1, 80)} matches\n" + self.slice(size)
            meta = {"matches": 12, "truncated": False}
        elif kind == "edit":
            old, new = self.slice(120), self.slice(140)
            inp = {"filePath": f"{CWD}/src/app.py", "oldString": old, "newString": new}
            out = "Edit applied successfully."
            meta = {
                "diff": f"--- a/src/app.py\n+++ b/src/app.py\n-{old}\n+{new}",
                "diagnostics": {},
            }
        else:  # glob, list, webfetch
            inp = {"pattern": "**/*.py", "path": CWD} if kind != "webfetch" else {"url": CWD}
            out = self.slice(size)
            meta = {"count": self.rng.randint(1, 500), "truncated": False}
        return self.part(
            mid,
            {
                "type": "tool",
                "callID": f"toolu_{self.counter:020d}",
                "tool": kind,
                "state": self.tool_state(inp, out, meta, kind, compacted),
            },
        )

    def legacy_tool(self, mid: str, size: int) -> list[dict[str, Any]]:
        """The older shape: a call with `state.input` and no status, then its `tool_result`."""
        kind = self.rng.choice(["bash", "read", "grep"])
        if kind == "bash":
            inp: dict[str, Any] = {"command": "pytest -x -q " + self.prose(20)}
        elif kind == "read":
            inp = {"filePath": f"{CWD}/src/module_{self.rng.randint(0, 96)}.py", "limit": 2000}
        else:
            inp = {"pattern": " ".join(self.rng.choices(_WORDS, k=40)), "path": CWD}
        call = self.part(mid, {"type": "tool", "tool": kind, "state": {"input": inp}})
        result: dict[str, Any] = {"type": "tool_result", "text": self.slice(size)}
        if self.rng.random() < 0.5:
            result["tool"] = kind
        return [call, self.part(mid, result)]

    def step_parts(self, mid: str, snap: str) -> tuple[dict[str, Any], dict[str, Any]]:
        start = self.part(mid, {"type": "step-start", "snapshot": snap})
        finish = self.part(
            mid,
            {
                "type": "step-finish",
                "reason": "tool-calls",
                "snapshot": snap,
                "cost": 0.001,
                "tokens": {"input": 1200, "output": 80, "reasoning": 0, "cache": {"read": 0}},
            },
        )
        return start, finish

    def text_part(self, mid: str, words: int) -> dict[str, Any]:
        times = {"start": self.tick(), "end": self.tick()}
        return self.part(mid, {"type": "text", "text": self.prose(words), "time": times})


# --- shapes: one assistant step each -------------------------------------------------------------

StepFn = Callable[[_Gen, str, bool, bool], list[dict[str, Any]]]


def _mixed_size(g: _Gen) -> int:
    r = g.rng.random()
    if r < 0.05:
        return g.rng.randint(24_000, 58_000)  # a big cat/seq/log dump
    if r < 0.45:
        return g.rng.randint(2_500, 10_000)
    return g.rng.randint(40, 1_800)


def _mixed_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    if final:
        return [g.text_part(mid, g.rng.randint(20, 160))]
    names = ("bash", "bash", "read", "read", "grep", "edit")
    parts = [g.tool(mid, compacted, names, _mixed_size(g)) for _ in range(g.rng.choice([1, 1, 2]))]
    if g.rng.random() < 0.3:
        parts.insert(0, g.part(mid, {"type": "reasoning", "text": g.prose(40)}))
    return parts


def _text_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    if not final and g.rng.random() < 0.1:
        return [g.tool(mid, False, ("read", "grep"), g.rng.randint(1_000, 4_000))]
    return [g.text_part(mid, g.rng.randint(200, 1_200))]


def _tool_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    if final:
        return [g.text_part(mid, 60)]
    names = ("read", "grep", "glob", "list", "webfetch")
    sizes = [g.rng.choice([300, 1_000, 3_000, 8_000, 20_000]) for _ in range(g.rng.randint(1, 2))]
    return [g.tool(mid, False, names, size) for size in sizes]


def _small_parts_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    parts = [g.part(mid, {"type": "reasoning", "text": g.prose(12)}), g.text_part(mid, 15)]
    names = ("read", "grep", "glob", "bash", "edit")
    for _ in range(g.rng.randint(7, 10)):
        parts.append(g.tool(mid, False, names, g.rng.randint(50, 300)))
        parts.append(g.part(mid, {"type": "reasoning", "text": g.prose(6)}))
    parts.append(g.part(mid, {"type": "patch", "hash": "0f3a9d1", "files": [f"{CWD}/a.py"]}))
    parts.append(g.part(mid, {"type": "file", "mime": "text/plain", "url": f"file://{CWD}/a"}))
    parts.append(g.part(mid, {"type": "agent", "name": "general"}))
    return parts


def _huge_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    if final:
        return [g.text_part(mid, 60)]
    return [g.tool(mid, False, ("read", "grep", "bash"), g.rng.randint(100, 3_000))]


def _legacy_step(g: _Gen, mid: str, compacted: bool, final: bool) -> list[dict[str, Any]]:
    if final:
        return [g.text_part(mid, 80)]
    parts = [g.text_part(mid, 20)]
    for _ in range(g.rng.choice([1, 1, 2])):
        parts += g.legacy_tool(mid, _mixed_size(g))
    return parts


class Shape:
    """A session shape: the corpus its outputs come from, its step, where compactions sit."""

    def __init__(
        self,
        kind: str,
        step: StepFn,
        compactions: tuple[float, ...] = (),
        prompt_words: tuple[int, int] = (20, 40),
    ) -> None:
        self.kind = kind
        self.step = step
        self.compactions = compactions
        self.prompt_words = prompt_words


SHAPES: dict[str, Shape] = {
    "mixed": Shape("mixed", _mixed_step, (0.6,)),
    "text_heavy": Shape("ascii", _text_step, prompt_words=(100, 600)),
    "tool_ascii": Shape("ascii", _tool_step),
    "tool_errors": Shape("errors", _tool_step),
    "non_ascii": Shape("wide", _mixed_step, (0.5,), prompt_words=(30, 200)),
    "small_parts": Shape("mixed", _small_parts_step),
    "huge_output": Shape("ascii", _huge_step),
    "deep_compaction": Shape("mixed", _mixed_step, (1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6)),
    "legacy": Shape("mixed", _legacy_step),
}
#: one output of this many characters in `huge_output`
HUGE_OUTPUT = 5_000_000


def generate(n: int, shape: str = "mixed", seed: int = 7) -> list[dict[str, Any]]:
    """`n` messages (exactly), oldest first, of one of `SHAPES`."""
    spec = SHAPES[shape]
    g = _Gen(seed, spec.kind)
    msgs: list[dict[str, Any]] = []
    pending = sorted(int(n * at) for at in spec.compactions)
    done = 0

    def pruned(i: int) -> bool:  # outputs OpenCode pruned: early ones, and after a compaction
        return shape == "mixed" and (i < int(n * 0.3) or (done > 0 and i < int(n * 0.85)))

    while len(msgs) < n:
        if pending and len(msgs) >= pending[0] and len(msgs) > 1:
            pending.pop(0)
            done += 1
            msgs += _compaction(g, msgs)
            continue
        words = g.rng.randint(*spec.prompt_words)
        prompt = g.user(g.prose(words))
        msgs.append(prompt)
        steps = g.rng.randint(1, 5)
        for s in range(steps + 1):
            if len(msgs) >= n:
                break
            mid = g.new_id("msg")
            snap = f"{g.rng.getrandbits(160):040x}"
            start, finish = g.step_parts(mid, snap)
            final = s == steps
            body = spec.step(g, mid, pruned(len(msgs)), final)
            if final:
                finish["reason"] = "stop"
            msgs.append(
                g.assistant(
                    prompt["info"]["id"],
                    "stop" if final else "tool-calls",
                    [start, *body, finish],
                    mid,
                )
            )
    msgs = msgs[:n]
    if shape == "huge_output" and n >= 4:
        _plant_huge_output(g, msgs[-3])
    if shape == "deep_compaction" and n >= 12:  # a marker without summary: ignored
        msgs[-1] = g.user(parts=[{"type": "compaction", "auto": True}])
    return msgs


def _compaction(g: _Gen, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A marker (with `tail_start_id` six messages back) and its summary."""
    tail_start = msgs[-min(6, len(msgs) - 1)]["info"]["id"]
    marker = g.user(parts=[{"type": "compaction", "auto": False, "tail_start_id": tail_start}])
    sid = g.new_id("msg")
    text = "## Goal\n" + g.prose(60) + "\n\n## Progress\n"
    text += "\n".join("- " + g.prose(12) for _ in range(8))
    parts = [
        g.part(sid, {"type": "step-start"}),
        g.part(sid, {"type": "text", "text": text}),
        g.part(sid, {"type": "step-finish", "reason": "stop"}),
    ]
    summary = g.assistant(marker["info"]["id"], "stop", parts, sid, summary=True)
    summary["info"]["mode"] = summary["info"]["agent"] = "compaction"
    return [marker, summary]


def _plant_huge_output(g: _Gen, msg: dict[str, Any]) -> None:
    """Replace the message's parts by one read call whose output is HUGE_OUTPUT chars of log."""
    mid = msg["info"]["id"]
    reps = HUGE_OUTPUT // len(g.corpus) + 1
    out = (g.corpus * reps)[:HUGE_OUTPUT]
    inp = {"filePath": f"{CWD}/logs/all.log"}
    meta = {"preview": out[:400], "truncated": False}
    call = g.part(
        mid,
        {"type": "tool", "tool": "read", "state": g.tool_state(inp, out, meta, "read", False)},
    )
    msg["info"]["role"] = "assistant"
    msg["parts"] = [call]


@lru_cache(maxsize=1)
def session_bytes(n: int, shape: str = "mixed") -> bytes:
    """The session as compact JSON (what `GET /session/{id}/message` returns), cached."""
    return json.dumps(generate(n, shape), ensure_ascii=False, separators=(",", ":")).encode()


@lru_cache(maxsize=1)
def session_objects(n: int, shape: str = "mixed") -> list[dict[str, Any]]:
    """`session_bytes(n, shape)` parsed (what a client gets from ``resp.json()``), cached."""
    parsed: list[dict[str, Any]] = json.loads(session_bytes(n, shape))
    return parsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("messages", type=int)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="mixed")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", help="write the JSON here (default: print its size)")
    args = parser.parse_args(argv)
    data = json.dumps(
        generate(args.messages, args.shape, args.seed), ensure_ascii=False, separators=(",", ":")
    ).encode()
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data)
    print(f"{args.messages} {args.shape} messages, {len(data):,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
