"""The plugin's toasts under Node, against a scripted service: each ended turn is toasted once,
whether it comes live, in the backlog replayed after ``Last-Event-ID``, or from the ``snapshot``
of a service that cannot replay; a tool call reconnects a dropped stream at once.

OpenCode's own end to end (real TUI toasts, a real service restart) is in
tests/e2e/test_opencode_toast.py; this one drives every path by hand, quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from asyncagents.opencode import plugin_source

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

STUB = """\
const any = new Proxy(function () {}, { get: () => any, apply: () => any })
export function tool(definition) {
  return definition
}
tool.schema = any
"""

DRIVER = """\
import { AsyncAgentsPlugin } from "./plugin.mjs"
import readline from "node:readline"

const out = (value) => process.stdout.write(JSON.stringify(value) + "\\n")
const client = { tui: { showToast: async ({ body }) => out({ toast: body }) } }
const hooks = await AsyncAgentsPlugin({ client })
const lines = readline.createInterface({ input: process.stdin })
for await (const line of lines) {
  const [session, name] = line.split(" ")
  const text = await hooks.tool[name].execute({}, { sessionID: session, agent: "build" })
  out({ answer: text })
}
"""


@dataclass(eq=False)
class Stream:
    """One connection to the scripted ``GET /v1/events``."""

    last_event_id: str | None
    writer: asyncio.StreamWriter
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, event_id: int, kind: str, data: dict[str, Any]) -> None:
        frame = f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"
        self.writer.write(frame.encode())
        await self.writer.drain()

    def end(self) -> None:
        self.ended.set()


class ScriptedService:
    """``POST /v1/tools/*`` answers ``ok``; each ``GET /v1/events`` is handed to the test (or
    refused with 503 while `down`)."""

    def __init__(self) -> None:
        self.streams: asyncio.Queue[Stream] = asyncio.Queue()
        self.refused = 0
        self.down = False
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            request, *lines = head.split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)
            }
            path = request.split()[1]
            if path.startswith("/v1/tools/"):
                await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.dumps({"text": "ok"}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )
            elif self.down:
                self.refused += 1
                writer.write(b"HTTP/1.1 503 Unavailable\r\ncontent-length: 0\r\n\r\n")
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"cache-control: no-cache\r\n\r\n"
                )
                await writer.drain()
                stream = Stream(headers.get("last-event-id"), writer)
                await self.streams.put(stream)
                await stream.ended.wait()
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def next_stream(self, timeout: float = 10) -> Stream:
        return await asyncio.wait_for(self.streams.get(), timeout)


class Plugin:
    """The plugin under Node; `call` makes a tool call, `toasts` are the toasts shown."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.toasts: list[dict[str, Any]] = []
        self._answers: asyncio.Queue[str] = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            value = json.loads(line)
            if "toast" in value:
                self.toasts.append(value["toast"])
            else:
                await self._answers.put(value["answer"])

    async def call(self, session: str, tool: str = "asyncagents_list") -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{session} {tool}\n".encode())
        await self.process.stdin.drain()
        return await asyncio.wait_for(self._answers.get(), 10)

    def messages(self) -> list[str]:
        return [str(t["message"]) for t in self.toasts]


@pytest.fixture
async def service() -> AsyncIterator[ScriptedService]:
    svc = ScriptedService()
    yield svc
    if svc.server is not None:
        svc.server.close()


@pytest.fixture
async def plugin(tmp_path: Path, service: ScriptedService) -> AsyncIterator[Plugin]:
    url = await service.start()
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    package = tmp_path / "node_modules" / "@opencode-ai" / "plugin"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        json.dumps({"name": "@opencode-ai/plugin", "type": "module", "main": "index.js"})
    )
    (package / "index.js").write_text(STUB)
    (tmp_path / "plugin.mjs").write_text(plugin_source(url, token))
    (tmp_path / "driver.mjs").write_text(DRIVER)
    process = await asyncio.create_subprocess_exec(
        "node",
        str(tmp_path / "driver.mjs"),
        cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    runner = Plugin(process)
    yield runner
    process.kill()
    await process.wait()
    runner._reader.cancel()


def task(
    task_id: str, status: str, *, session: str = "ses_a", turn: int = 1, updated_at: int = 5000
) -> dict[str, Any]:
    return {
        "id": task_id,
        "parent_session_id": session,
        "status": status,
        "turn": turn,
        "updated_at": updated_at,
        "description": f"job {task_id}",
    }


def toast(task_id: str, verb: str) -> str:
    return f'Background task "job {task_id}" {verb} ({task_id}).'


async def settle(plugin: Plugin, count: int, timeout: float = 5) -> None:
    """Wait until `count` toasts were shown, then a little more (none may follow)."""
    end = time.monotonic() + timeout
    while len(plugin.toasts) < count and time.monotonic() < end:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)


async def test_each_turn_end_is_toasted_once_live_from_the_backlog_and_from_a_snapshot(
    service: ScriptedService, plugin: Plugin
) -> None:
    assert await plugin.call("ses_a") == "ok"
    first = await service.next_stream()
    assert first.last_event_id is None
    # the first snapshot: what ended before the plugin watched is old news
    await first.send(
        10,
        "snapshot",
        {
            "tasks": [
                task("tsk_old", "completed", updated_at=500),
                task("tsk_other", "completed", session="ses_z", updated_at=5000),
            ],
            "now_ms": 1000,
        },
    )
    await first.send(11, "task.created", task("tsk_1", "running"))
    await first.send(12, "task.completed", task("tsk_1", "completed"))
    await first.send(13, "task.completed", task("tsk_1", "completed"))  # told twice: one toast
    await first.send(14, "task.created", task("tsk_2", "running"))
    await first.send(15, "task.created", task("tsk_5", "running"))
    await first.send(16, "task.completed", task("tsk_z", "completed", session="ses_z"))
    await settle(plugin, 1)
    assert plugin.messages() == [toast("tsk_1", "completed")]

    # dropped: the plugin resumes after the last id it saw; the backlog ends tsk_2
    first.end()
    second = await service.next_stream()
    assert second.last_event_id == "16"
    await second.send(17, "task.error", task("tsk_2", "error"))
    await second.send(18, "task.created", task("tsk_7", "queued"))
    await settle(plugin, 2)
    assert plugin.messages()[1:] == [toast("tsk_2", "failed")]

    # the service goes down: the plugin backs off (1, 2, 4, 8 s between tries)...
    service.down = True
    second.end()
    while service.refused < 3:
        await asyncio.sleep(0.05)
    service.down = False
    # ...and a tool call reconnects it at once, 8 s before its next try
    begin = time.monotonic()
    assert await plugin.call("ses_b") == "ok"
    third = await service.next_stream(timeout=4)
    assert time.monotonic() - begin < 4
    assert third.last_event_id == "18"
    # a restarted service cannot replay: a snapshot of every task instead
    await third.send(
        50,
        "snapshot",
        {
            "tasks": [
                task("tsk_old", "completed", updated_at=500),
                task("tsk_1", "completed", turn=2, updated_at=6000),  # a follow-up ended
                task("tsk_2", "error"),  # toasted from the backlog already
                task("tsk_3", "error", updated_at=1500),  # never seen, ended after the snapshot
                task("tsk_4", "running", updated_at=1600),
                task("tsk_5", "cancelled"),  # seen running before the drop
                task("tsk_6", "completed", session="ses_b", updated_at=7000),
                task("tsk_7", "cancelled"),  # seen queued before the drop
                task("tsk_z", "completed", session="ses_z", updated_at=9000),
            ],
            "now_ms": 10_000,
        },
    )
    await settle(plugin, 7)
    assert plugin.messages()[2:] == [
        toast("tsk_1", "completed"),
        toast("tsk_3", "failed"),
        toast("tsk_5", "was cancelled"),
        toast("tsk_6", "completed"),
        toast("tsk_7", "was cancelled"),
    ]
    # the same snapshot again, then the live end of tsk_4: nothing twice
    third.end()
    fourth = await service.next_stream()
    await fourth.send(60, "snapshot", {"tasks": [task("tsk_3", "error")], "now_ms": 11_000})
    await fourth.send(61, "task.completed", task("tsk_1", "completed", turn=2))
    await fourth.send(62, "task.completed", task("tsk_4", "completed"))
    await settle(plugin, 8)
    assert plugin.messages()[7:] == [toast("tsk_4", "completed")]
    assert plugin.toasts[0] == {
        "title": "asyncagents",
        "message": toast("tsk_1", "completed"),
        "variant": "success",
        "duration": 6000,
    }
    fourth.end()


async def test_an_unreadable_event_is_skipped_and_the_stream_goes_on(
    service: ScriptedService, plugin: Plugin
) -> None:
    await plugin.call("ses_a")
    stream = await service.next_stream()
    await stream.send(1, "snapshot", {"tasks": [], "now_ms": 1000})
    stream.writer.write(b"id: 2\nevent: task.completed\ndata: {not json\n\n")
    await stream.send(3, "task.completed", task("tsk_1", "completed"))
    await settle(plugin, 1)
    assert plugin.messages() == [toast("tsk_1", "completed")]
    stream.end()
