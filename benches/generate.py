"""Deterministic generator of realistic OpenCode sessions for the fork pipeline benchmarks.

Shapes follow shared/fixtures/opencode/FORMAT.md (opencode 1.18): a user prompt, then one
assistant message per step (step-start, sometimes reasoning, tool parts for bash/read/grep/edit
with their real metadata, step-finish), and a final text step. Some outputs are large (a
``cat``/``seq`` of 20-50 KB), some tool calls fail (``status:"error"``), older outputs are
pruned (``state.time.compacted``), and one compaction (marker with ``tail_start_id`` + summary)
sits at about 60 % of the session.

Size is about 5 KB of JSON per message: ~1 MB at 200 messages, ~10 MB at 2,000,
~100 MB at 20,000.

    python benches/generate.py 2000 --out /tmp/session.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from functools import lru_cache
from typing import Any

SESSION = "ses_bench000000000000000000"
T0 = 1_795_000_000_000
MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4"}
CWD = "/home/dev/proj"

_WORDS = (
    "the config loader reads every field before the worker pool starts and the retry policy "
    "backs off with jitter so that timeouts in the upstream service do not cascade into the "
    "scheduler queue while the cache is warm"
).split()
_UNICODE = ["café", "naïve", "日本語", "données", "😀", "Größe", "\u2139\ufe0f", "→", "e\u0301"]


def _corpus(rng: random.Random) -> str:
    """About 2 MB of realistic tool output: code, listings, logs, CSV; outputs are slices of it."""
    lines: list[str] = []
    for i in range(30_000):
        kind = i % 6
        if kind == 0:
            lines.append(f"    def compute_{i}(self, x: int, y: int = 0) -> int:")
        elif kind == 1:
            lines.append(
                f"-rw-r--r-- 1 dev dev {rng.randint(100, 99_999):>6} Nov 22 13:{i % 60:02d} f{i}.py"
            )
        elif kind == 2:
            lines.append(
                f"2026-11-22T13:{i % 60:02d}:{i % 59:02d}Z INFO worker[{i % 8}] handled {i} jobs"
            )
        elif kind == 3:
            lines.append(f"{i},{rng.choice(_UNICODE)},{rng.random():.6f},{rng.randint(0, 10**6)}")
        elif kind == 4:
            lines.append(" ".join(rng.choices(_WORDS, k=rng.randint(4, 14))))
        else:
            lines.append(f"src/module_{i % 97}.py:{i}:        return self._cache.get(key_{i})")
    return "\n".join(lines)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.corpus = _corpus(self.rng)
        self.clock = T0
        self.counter = 0

    def tick(self, ms: int = 37) -> int:
        self.clock += ms
        return self.clock

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter:012x}{'bench'}{self.counter % 997:03d}"

    def slice(self, size: int) -> str:
        start = self.rng.randrange(0, len(self.corpus) - size - 1)
        return self.corpus[start : start + size]

    def prose(self, words: int) -> str:
        text = " ".join(self.rng.choices(_WORDS, k=words))
        if self.rng.random() < 0.3:
            text += " " + self.rng.choice(_UNICODE)
        return text

    def part(self, mid: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.new_id("prt"), "sessionID": SESSION, "messageID": mid, **body}

    def output_size(self) -> int:
        r = self.rng.random()
        if r < 0.05:
            return self.rng.randint(24_000, 58_000)  # a big cat/seq/log dump
        if r < 0.45:
            return self.rng.randint(2_500, 10_000)
        return self.rng.randint(40, 1_800)

    def tool(self, mid: str, compacted: bool) -> dict[str, Any]:
        kind = self.rng.choice(["bash", "bash", "read", "read", "grep", "edit"])
        start = self.tick(5)
        size = self.output_size()
        if kind == "bash":
            cmd = self.rng.choice(
                [
                    "ls -la src",
                    "pytest -x -q",
                    "git diff --stat",
                    "cat data/records.csv",
                    "seq 1 3000",
                ]
            )
            inp: dict[str, Any] = {"command": cmd, "description": self.prose(6)}
            out = self.slice(size)
            if self.rng.random() < 0.1:
                out += "\nError: process exited with code 2\nTraceback (most recent call last):"
            meta: dict[str, Any] = {
                "output": out[:2000],
                "exit": 0,
                "truncated": False,
                "description": inp["description"],
            }
        elif kind == "read":
            inp = {"filePath": f"{CWD}/src/module_{self.rng.randint(0, 96)}.py", "limit": 2000}
            body = self.slice(size)
            out = (
                f"<path>{inp['filePath']}</path>\n<type>file</type>\n<content>\n{body}\n</content>"
            )
            meta = {"preview": body[:400], "truncated": False, "loaded": []}
        elif kind == "grep":
            inp = {"pattern": r"def compute_\d+", "path": CWD, "include": "*.py"}
            out = f"Found {self.rng.randint(1, 80)} matches\n" + self.slice(min(size, 4_000))
            meta = {"matches": 12, "truncated": False}
        else:
            old, new = self.slice(120), self.slice(140)
            inp = {"filePath": f"{CWD}/src/app.py", "oldString": old, "newString": new}
            out = "Edit applied successfully."
            meta = {
                "diff": f"--- a/src/app.py\n+++ b/src/app.py\n-{old}\n+{new}",
                "filediff": {"additions": 3, "deletions": 2},
                "diagnostics": {},
            }
        state: dict[str, Any]
        if self.rng.random() < 0.05:
            state = {
                "status": "error",
                "input": inp,
                "error": f"File not found: {CWD}/does/not/exist_{self.counter}.txt",
                "time": {"start": start, "end": self.tick(3)},
            }
        else:
            state = {
                "status": "completed",
                "input": inp,
                "output": out,
                "title": kind,
                "metadata": meta,
                "time": {"start": start, "end": self.tick(40)},
            }
            if compacted:
                state["time"]["compacted"] = T0 + 9_999_999
        return self.part(
            mid,
            {"type": "tool", "callID": f"toolu_{self.counter:020d}", "tool": kind, "state": state},
        )

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

    def step(self, parent: str, compacted: bool, final: bool) -> dict[str, Any]:
        mid = self.new_id("msg")
        snap = f"{self.rng.getrandbits(160):040x}"
        parts = [self.part(mid, {"type": "step-start", "snapshot": snap})]
        if self.rng.random() < 0.3:
            parts.append(
                self.part(
                    mid,
                    {
                        "type": "reasoning",
                        "text": self.prose(40),
                        "time": {"start": self.tick(), "end": self.tick()},
                    },
                )
            )
        if final:
            parts.append(
                self.part(
                    mid,
                    {
                        "type": "text",
                        "text": self.prose(self.rng.randint(20, 160)),
                        "time": {"start": self.tick(), "end": self.tick()},
                    },
                )
            )
        else:
            for _ in range(self.rng.choice([1, 1, 1, 2])):
                parts.append(self.tool(mid, compacted))
        finish = "stop" if final else "tool-calls"
        parts.append(
            self.part(
                mid,
                {
                    "type": "step-finish",
                    "reason": finish,
                    "snapshot": snap,
                    "cost": 0.001,
                    "tokens": {
                        "input": 1200,
                        "output": 80,
                        "reasoning": 0,
                        "cache": {"read": 0, "write": 0},
                    },
                },
            )
        )
        if not final and any(p["type"] == "tool" and p["tool"] == "edit" for p in parts):
            parts.append(
                self.part(mid, {"type": "patch", "hash": snap[:12], "files": [f"{CWD}/src/app.py"]})
            )
        return self.assistant(parent, finish, parts, mid)


def generate(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """`n` messages (exactly), oldest first, with one compaction at about 60 %."""
    g = _Gen(seed)
    msgs: list[dict[str, Any]] = []
    compaction_at = int(n * 0.6)
    # outputs pruned by OpenCode (state.time.compacted): early ones, and after the compaction
    # those up to the last turns, which prune protects

    def pruned(i: int) -> bool:
        return i < int(n * 0.3) or (compaction_done and i < int(n * 0.85))

    compaction_done = n < 12
    while len(msgs) < n:
        if not compaction_done and len(msgs) >= compaction_at:
            tail_start = msgs[-min(6, len(msgs) - 1)]["info"]["id"]
            marker = g.user(
                parts=[{"type": "compaction", "auto": False, "tail_start_id": tail_start}]
            )
            sid = g.new_id("msg")
            text = (
                "## Goal\n"
                + g.prose(60)
                + "\n\n## Progress\n"
                + "\n".join("- " + g.prose(12) for _ in range(8))
            )
            summary = g.assistant(
                marker["info"]["id"],
                "stop",
                [
                    g.part(sid, {"type": "step-start"}),
                    g.part(sid, {"type": "text", "text": text}),
                    g.part(sid, {"type": "step-finish", "reason": "stop"}),
                ],
                sid,
                summary=True,
            )
            summary["info"]["mode"] = summary["info"]["agent"] = "compaction"
            msgs += [marker, summary]
            compaction_done = True
            continue
        prompt = g.user()
        msgs.append(prompt)
        steps = g.rng.randint(1, 5)
        for s in range(steps + 1):
            if len(msgs) >= n:
                break
            msgs.append(g.step(prompt["info"]["id"], pruned(len(msgs)), final=s == steps))
    return msgs[:n]


@lru_cache(maxsize=4)
def session_bytes(n: int) -> bytes:
    return json.dumps(generate(n), ensure_ascii=False, separators=(",", ":")).encode()


def session_objects(n: int) -> list[dict[str, Any]]:
    """A fresh parse of `session_bytes(n)` (what a client gets from ``resp.json()``)."""
    return json.loads(session_bytes(n))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("messages", type=int)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", help="write the JSON here (default: print its size)")
    args = parser.parse_args(argv)
    data = json.dumps(
        generate(args.messages, args.seed), ensure_ascii=False, separators=(",", ":")
    ).encode()
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data)
    print(f"{args.messages} messages, {len(data):,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
