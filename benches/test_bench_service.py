"""Service benchmarks through OpenCode itself (the plugin installed by ``asyncagents opencode
install``, ``asyncagents serve`` as a subprocess, the fake model of tests/e2e):

- tool-call round trip through the plugin: the model calls ``asyncagents_list``; the time is the
  tool part's own ``time.end - time.start`` as OpenCode records it (the plugin reading the token,
  the HTTP call to the service, the service's answer). Median and p99 go to ``extra_info``; the
  benchmark's own timing is the whole prompt (model step, tool, reply);
- child end to parent wake: a task is launched through the service's HTTP route, and the time
  from the child's last assistant message (``time.completed``) to the parent's notice message
  (``time.created``, both OpenCode's clock): the wake prompt of ``--wake each``.

``ASYNCAGENTS_BENCH_SMOKE=1`` runs 5 round trips and 2 wakes instead of 200 and 20.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from asyncagents.tasks import OpenCodeBackend
from e2e_support import AGENT, free_port, opencode_binary
from fake_model import FakeModel
from plugin_support import (
    PluginOpenCode,
    ServiceProcess,
    call,
    install_plugin_cli,
    new_parent,
    notices_of,
    say_to,
    tool_parts,
)

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
ROUND_TRIPS = 5 if SMOKE else 200
WAKES = 2 if SMOKE else 20


class Stack:
    """OpenCode with the plugin, and the service, started once for this module."""

    def __init__(self, opencode: PluginOpenCode, service: ServiceProcess) -> None:
        self.opencode = opencode
        self.service = service


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("bench-service")
    (root / "project").mkdir()
    port = free_port()
    install_plugin_cli(root / "project", root / "state", f"http://127.0.0.1:{port}")
    model = FakeModel().start()
    opencode = PluginOpenCode(opencode_binary(), model.base_url, root, root / "state")
    opencode.project = root / "project"
    service: ServiceProcess | None = None
    try:
        opencode.start()
        service = ServiceProcess(root, opencode.base_url, root / "state")
        service.port = port
        service.url = f"http://127.0.0.1:{port}"
        service.start()
        yield Stack(opencode, service)
    finally:
        if service is not None:
            service.stop(signal.SIGTERM)
        opencode.stop()
        model.stop()


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered), "p99_ms": p99, "n": len(ordered)}


def test_tool_round_trip_through_the_plugin(benchmark: Any, stack: Stack) -> None:
    benchmark.group = "service-plugin-round-trip"
    loop = asyncio.new_event_loop()
    backend = OpenCodeBackend(stack.opencode.base_url)
    parent = loop.run_until_complete(new_parent(backend))
    prompt = call("asyncagents_list", {})

    def one() -> None:
        loop.run_until_complete(say_to(backend, parent, prompt))

    try:
        benchmark.pedantic(one, rounds=ROUND_TRIPS, iterations=1, warmup_rounds=1)
        messages = loop.run_until_complete(backend.messages(parent))
    finally:
        loop.run_until_complete(backend.aclose())
        loop.close()
    parts = tool_parts(messages, "asyncagents_list")
    assert all(p["state"]["output"] == "No background tasks found" for p in parts)
    samples = [float(p["state"]["time"]["end"] - p["state"]["time"]["start"]) for p in parts[1:]]
    benchmark.extra_info.update(_quantiles(samples))


def test_child_end_to_parent_wake(benchmark: Any, stack: Stack) -> None:
    benchmark.group = "service-wake-latency"
    loop = asyncio.new_event_loop()
    backend = OpenCodeBackend(stack.opencode.base_url)
    token = (stack.service.state / "asyncagents" / "token").read_text().strip()
    http = httpx.AsyncClient(
        base_url=stack.service.url, headers={"authorization": f"Bearer {token}"}, timeout=60
    )
    opencode = httpx.AsyncClient(base_url=stack.opencode.base_url, timeout=60)
    samples: list[float] = []

    async def launch_and_wait() -> None:
        parent = await new_parent(backend)
        answer = await http.post(
            "/v1/tools/asyncagents_task",
            json={
                "session_id": parent,
                "agent": AGENT,
                "arguments": {"prompt": "quick job", "agent": AGENT, "description": "bench"},
            },
        )
        text = answer.json()["text"]
        assert text.startswith("Background task started: "), text
        task_id = text.split()[3].strip("`")
        for _ in range(2400):
            if any(t == task_id for _, t in await notices_of(backend, parent)):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no notice within 120 s")
        children = (await opencode.get(f"/session/{parent}/children")).json()
        (child_id,) = [str(c["id"]) for c in children]
        notice_at = next(
            m["info"]["time"]["created"]
            for m in await backend.messages(parent)
            if m["info"]["role"] == "user"
            and any(task_id in str(p.get("text", "")) for p in m.get("parts") or ())
        )
        child = await backend.messages(child_id)
        ended = max(
            m["info"]["time"].get("completed") or 0
            for m in child
            if m["info"]["role"] == "assistant"
        )
        samples.append(float(notice_at - ended))

    try:
        benchmark.pedantic(
            lambda: loop.run_until_complete(launch_and_wait()), rounds=WAKES, iterations=1
        )
    finally:
        loop.run_until_complete(http.aclose())
        loop.run_until_complete(opencode.aclose())
        loop.run_until_complete(backend.aclose())
        loop.close()
    assert len(samples) == WAKES
    benchmark.extra_info.update(_quantiles(samples))
