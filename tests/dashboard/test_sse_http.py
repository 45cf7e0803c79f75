"""``GET /v1/events`` over HTTP: a real manager's changes as SSE from uvicorn on 127.0.0.1, the
resume with ``Last-Event-ID`` after a reconnect, and the end of open streams when the service
drains."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asyncagents.service import begin_drain
from asyncagents.tasks import TaskManager
from dash_support import TOKEN, LiveService
from starlette.applications import Starlette

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def live() -> Iterator[LiveService]:
    service = LiveService().start()
    yield service
    service.stop()


def read_events(lines: Iterator[str], count: int) -> list[tuple[str, str, Any]]:
    """The next `count` events (id, kind, data) from a response's lines; comments skipped."""
    out: list[tuple[str, str, Any]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            continue
        if line == "":
            if "event" in fields:
                out.append((fields["id"], fields["event"], json.loads(fields["data"])))
                if len(out) == count:
                    return out
            fields = {}
            continue
        name, _, value = line.partition(": ")
        fields[name] = value
    raise AssertionError(f"the stream ended after {len(out)} of {count} events")


def test_changes_stream_and_resume_after_reconnect(live: LiveService) -> None:
    url = live.url + "/v1/events"
    # a read timeout below the 15 s heartbeat: a missing event fails the test
    with httpx.Client(timeout=httpx.Timeout(10)) as http:
        with http.stream("GET", url, headers=AUTH) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            lines = response.iter_lines()
            [snapshot] = read_events(lines, 1)
            assert snapshot[1] == "snapshot" and snapshot[2]["tasks"] == []
            first = live.call(live.manager.task(live.parent, "One [hold:one]", "general", "one"))
            created = read_events(lines, 1)[0]
            assert created[1:] == ("task.created", created[2])
            assert created[2]["id"] == first.id and created[2]["status"] == "running"
            assert int(created[0]) > int(snapshot[0])
            last_id = created[0]
        # disconnected: these happen while no one listens
        live.run(lambda: live.script.release("one"))
        second = live.call(live.manager.task(live.parent, "Two", "build", "two"))

        async def both_done() -> None:
            for _ in range(1000):
                if all(t.status.value == "completed" for t in await _list(live.manager)):
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("tasks not completed")

        live.call(both_done())
        with http.stream("GET", url, headers={**AUTH, "Last-Event-ID": last_id}) as response:
            lines = response.iter_lines()
            missed: list[tuple[str, str, Any]] = []
            wanted = {("task.completed", first.id), ("task.completed", second.id)}
            while not wanted <= {(e[1], e[2]["id"]) for e in missed}:
                missed += read_events(lines, 1)
        # exactly the events after the last one read: consecutive ids, none twice, no snapshot
        ids = [int(e[0]) for e in missed]
        assert ids == list(range(int(last_id) + 1, int(last_id) + 1 + len(ids)))
        assert "snapshot" not in [e[1] for e in missed]
        assert next(e[1] for e in missed if e[2]["id"] == second.id) in (
            "task.created",
            "task.completed",  # created and done between two looks at the store
        )
        ended = {e[2]["id"]: e[2] for e in missed if e[1] == "task.completed"}
        assert ended[first.id]["result"] == "Done: One [hold:one]"
        assert ended[second.id]["result"] == "Done: Two"
        # an id from before the ring (or another boot) gets a fresh snapshot
        with http.stream("GET", url, headers={**AUTH, "Last-Event-ID": "1"}) as response:
            [fresh] = read_events(response.iter_lines(), 1)
        assert fresh[1] == "snapshot"
        assert {t["id"] for t in fresh[2]["tasks"]} == {first.id, second.id}


async def _list(manager: TaskManager) -> list[Any]:
    return list(await manager.store.list_tasks())


async def test_draining_ends_open_streams(app: Starlette) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as http:
        # the ASGI transport returns once the stream has ended: the drain must end it
        pending = asyncio.ensure_future(http.get("/v1/events", headers=AUTH))
        await asyncio.sleep(0.2)
        assert not pending.done()
        begin_drain(app)
        response = await asyncio.wait_for(pending, 10)
        assert response.status_code == 200
        assert "event: snapshot" in response.text
        refused = await http.get("/v1/events", headers=AUTH)
        assert refused.status_code == 503
        assert refused.json() == {"error": "unavailable", "detail": "the service is stopping"}


def _open_unread_stream(live: LiveService, **headers: str) -> socket.socket:
    """A raw HTTP/1.1 request for the event stream on a socket with a small receive buffer,
    which the test then does not read: a client that stopped reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", live.port))
    lines = [
        "GET /v1/events HTTP/1.1",
        f"Host: 127.0.0.1:{live.port}",
        f"Authorization: Bearer {TOKEN}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def _wait(check: Any, what: str, timeout: float = 15) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_dropped_slow_reader_is_disconnected_and_frees_its_place(live: LiveService) -> None:
    hub = live.app.state.dashboard.hub
    connections = live.server.server_state.connections
    sock = _open_unread_stream(live)
    try:
        _wait(lambda: hub.subscriber_count == 1, "the stream to open")

        def flood() -> None:  # 12 MB of events at once: far over a subscriber's 4 MiB
            for n in range(200):
                hub.publish("task.updated", {"id": f"tsk_{n}", "pad": "p" * 60_000})

        live.run(flood)
        # the hub drops it, and the server resets the connection (it does not wait to flush
        # what the client does not read): the place is free, the connection gone
        _wait(lambda: hub.dropped_count == 1, "the drop")
        _wait(lambda: hub.subscriber_count == 0, "the place to be freed")
        _wait(lambda: len(connections) == 0, "the server to close the connection")
        sock.settimeout(10)
        ended = False
        try:
            while sock.recv(65536):
                pass
            ended = True  # EOF
        except ConnectionResetError:
            ended = True
        assert ended
    finally:
        sock.close()
    # the next client is served as usual
    with httpx.Client(timeout=httpx.Timeout(10)) as http:
        with http.stream("GET", live.url + "/v1/events", headers=AUTH) as response:
            assert response.status_code == 200
            [snapshot] = read_events(response.iter_lines(), 1)
            assert snapshot[1] == "snapshot"


@pytest.mark.parametrize(
    "last",
    ["²", pytest.param("1" * 5000, id="5000-digits"), "-1", "garbage", "9" * 30, "١٢"],
)
def test_an_unusable_last_event_id_gets_a_fresh_snapshot(live: LiveService, last: str) -> None:
    # the server reads header bytes as Latin-1: b"\xb2" is "²", for which isdigit() is true
    raw = last.encode("latin-1") if last.isascii() or last == "²" else last.encode("utf-8")
    with httpx.Client(timeout=httpx.Timeout(10)) as http:
        with http.stream(
            "GET",
            live.url + "/v1/events",
            headers=[*AUTH.items(), ("Last-Event-ID", raw)],  # type: ignore[list-item]
        ) as response:
            assert response.status_code == 200
            [snapshot] = read_events(response.iter_lines(), 1)
    assert snapshot[1] == "snapshot" and snapshot[2]["tasks"] == []
