"""The fork launch benchmark's parent (`fork_launch.py`): a generated session imported into a
real ``opencode serve`` is served back with every message, and forks as the generated one
does. Runs in CI's smoke step with the benchmarks."""

from __future__ import annotations

import json

import httpx
from asyncagents import build_fork_context
from fork_launch import FakeModel, OpenCodeServer, import_parent, importable, opencode_binary
from generate import session_objects


def test_importable_fills_in_only_what_opencode_requires():
    messages = session_objects(30, "mixed")
    before = json.loads(json.dumps(messages))
    after = importable(json.loads(json.dumps(messages)))
    changed = []
    for old, new in zip(before, after, strict=True):
        assert old["info"] == new["info"]
        for old_part, new_part in zip(old["parts"], new["parts"], strict=True):
            if old_part != new_part:
                added = {k: v for k, v in new_part.items() if old_part.get(k) != v}
                changed.append((new_part["type"], tuple(sorted(added))))
    assert set(changed) == {
        ("step-finish", ("tokens",)),
        ("step-finish", ("cost", "tokens")),
        ("reasoning", ("time",)),
    }


def test_an_imported_parent_is_served_whole_and_forks_the_same(tmp_path):
    shape = "mixed"  # the benchmark's; OpenCode 1.18 refuses the older shape's tool parts
    model = FakeModel().start()
    try:
        server = OpenCodeServer(opencode_binary(), model.base_url, tmp_path).start()
        try:
            parent = import_parent(server, 40, shape)
            served = httpx.get(f"{server.base_url}/session/{parent}/message", timeout=60)
            served.raise_for_status()
        finally:
            server.stop()
    finally:
        model.stop()
    generated = session_objects(40, shape)
    assert [m["info"]["id"] for m in served.json()] == [m["info"]["id"] for m in generated]
    assert build_fork_context(served.content) == build_fork_context(json.dumps(generated))
