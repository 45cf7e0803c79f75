"""`OpenCodeBackend` against a misbehaving server: every failure is a typed, bounded
`BackendError` naming the URL, and only OpenCode's own confirmed not-found answer says a session
is gone (issue 9, defects 3, 4 and 5, and the redirect counted as sent)."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from asyncagents.tasks import (
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendRedirectError,
    BackendResponseTooLargeError,
    BackendTimeoutError,
    BackendUnavailableError,
    EventFollower,
    OpenCodeBackend,
    PromptRequest,
    SessionNotFoundError,
)
from fake_opencode import ENDLESS_CHUNK, FakeOpenCode
from polling import until

MiB = 1024 * 1024
#: the overall deadline of the backends made here (the `backend` fixture's too)
TIMEOUT = 3.0
#: a test of a bounded call fails (rather than hangs) when the bound is missing
GUARD = 15.0


async def bounded(call: Awaitable[Any], guard: float = GUARD) -> Any:
    return await asyncio.wait_for(call, guard)


def calls_on(backend: OpenCodeBackend, sid: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every call about one session, by name."""
    return {
        "get_session": lambda: backend.get_session(sid),
        "messages": lambda: backend.messages(sid),
        "messages_raw": lambda: backend.messages_raw(sid),
        "prompt_no_reply": lambda: backend.prompt(sid, PromptRequest(text="x", no_reply=True)),
        "prompt_async": lambda: backend.prompt_async(sid, PromptRequest(text="x")),
        "abort": lambda: backend.abort(sid),
        "delete_session": lambda: backend.delete_session(sid),
    }


# --- defect 3: any 404 was "session deleted" ---------------------------------------------------


async def test_a_proxys_html_404_is_a_passing_error_not_a_deleted_session(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    added = time.monotonic()
    server.add_fault("/session/", "html404", seconds=3)
    for name, call in calls_on(backend, session_id).items():
        with pytest.raises(BackendError) as caught:
            await bounded(call())
        assert not isinstance(caught.value, SessionNotFoundError), name
        assert isinstance(caught.value, BackendHTTPError), name
        assert caught.value.status_code == 404
        assert caught.value.url is not None and caught.value.url.startswith(
            f"{server.url}/session/{session_id}"
        )
        assert "not OpenCode's NotFoundError answer" in str(caught.value)
        assert "404 Not Found" in str(caught.value)
    # the window passes: the session was never touched
    await asyncio.sleep(max(0.0, 3.2 - (time.monotonic() - added)))
    assert (await backend.get_session(session_id))["id"] == session_id
    assert server.call(lambda b: b.get_session(session_id))["id"] == session_id


async def test_other_json_404_is_not_a_deleted_session(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    server.add_fault(f"/session/{session_id}/message", "status", status=404, count=1)
    with pytest.raises(BackendHTTPError) as caught:
        await bounded(backend.messages(session_id))
    assert caught.value.status_code == 404


async def test_opencodes_not_found_is_confirmed_by_a_second_read(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    await backend.prompt(session_id, PromptRequest(text="hello", no_reply=True))
    server.call(lambda b: b.delete_session(session_id))
    with pytest.raises(SessionNotFoundError) as caught:
        await bounded(backend.messages(session_id))
    assert caught.value.session_id == session_id
    assert caught.value.url == f"{server.url}/session/{session_id}/message"
    assert caught.value.method == "GET"
    assert str(caught.value) == f"Session not found: {session_id}"


async def test_two_not_found_answers_are_needed_and_the_second_is_a_read_of_the_session(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    fault = server.add_fault(f"/session/{session_id}", "not_found", count=2)
    with pytest.raises(SessionNotFoundError):
        await bounded(backend.prompt_async(session_id, PromptRequest(text="x")))
    assert fault.hits == 2
    assert server.call(lambda b: b.get_session(session_id))["id"] == session_id


async def test_a_not_found_that_the_second_read_contradicts_is_passing(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    # one NotFoundError answer (a flapping server, a load balancer hitting another instance),
    # then the confirming read finds the session
    server.add_fault(f"/session/{session_id}", "not_found", count=1)
    with pytest.raises(BackendHTTPError) as caught:
        await bounded(backend.messages(session_id))
    assert not isinstance(caught.value, SessionNotFoundError)
    assert "the session exists" in str(caught.value)
    assert await backend.messages(session_id) == []


async def test_a_not_found_whose_confirmation_fails_is_passing(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    server.add_fault(f"/session/{session_id}/message", "not_found", count=1)
    server.add_fault(f"/session/{session_id}$", "status", status=503, count=1)
    with pytest.raises(BackendHTTPError) as caught:
        await bounded(backend.messages(session_id))
    assert not isinstance(caught.value, SessionNotFoundError)
    assert str(caught.value).endswith(
        f"but the second read GET {server.url}/session/{session_id} answered HTTP 503; the "
        "session is not taken as gone. Try again shortly."
    )


# --- 5xx, bodies that are not OpenCode's --------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_a_typed_http_error_naming_the_call(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str, status: int
) -> None:
    server.add_fault(f"/session/{session_id}/message", "status", status=status, count=1)
    with pytest.raises(BackendHTTPError) as caught:
        await bounded(backend.messages(session_id))
    url = f"{server.url}/session/{session_id}/message"
    assert (caught.value.status_code, caught.value.url, caught.value.method) == (status, url, "GET")
    assert f"answered GET {url} with HTTP {status}" in str(caught.value)
    if status == 500:
        assert "UnknownError: Unexpected server error." in str(caught.value)
    assert await backend.messages(session_id) == []


def mock_backend(handler: Callable[[httpx.Request], httpx.Response]) -> OpenCodeBackend:
    client = httpx.AsyncClient(
        base_url="http://opencode.test", transport=httpx.MockTransport(handler)
    )
    return OpenCodeBackend("http://opencode.test", client=client, timeout=TIMEOUT)


async def test_a_200_html_page_or_wrong_json_is_a_protocol_error() -> None:
    # opencode serve answers unknown paths with its web UI: 200 text/html
    page = httpx.Response(
        200, text="<!doctype html><html></html>", headers={"content-type": "text/html"}
    )
    backend = mock_backend(lambda request: page)
    for call in (
        backend.status(),
        backend.messages("ses_x"),
        backend.messages_raw("ses_x"),
        backend.prompt_async("ses_x", PromptRequest(text="x")),
    ):
        with pytest.raises(BackendProtocolError, match=r"http://opencode\.test/session/"):
            await call
    wrong = mock_backend(lambda request: httpx.Response(200, json={"not": "a list"}))
    with pytest.raises(BackendProtocolError, match="JSON of type dict, expected list"):
        await wrong.messages("ses_x")


async def test_an_unreachable_server_is_unavailable_naming_the_url() -> None:
    async with OpenCodeBackend("http://127.0.0.1:9", timeout=TIMEOUT) as backend:
        with pytest.raises(BackendUnavailableError) as caught:
            await bounded(backend.status())
    assert caught.value.url == "http://127.0.0.1:9/session/status"
    assert "is not reachable" in str(caught.value)


# --- defect 4: no overall deadline --------------------------------------------------------------


@pytest.mark.parametrize("call", ["messages", "messages_raw", "get_session", "prompt_no_reply"])
async def test_a_dripping_server_is_cut_at_the_overall_deadline(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str, call: str
) -> None:
    path = f"/session/{session_id}/message" if call != "get_session" else f"/session/{session_id}"
    fault = server.add_fault(path, "drip", interval=0.5)
    start = time.monotonic()
    with pytest.raises(BackendTimeoutError) as caught:
        await bounded(calls_on(backend, session_id)[call]())
    elapsed = time.monotonic() - start
    assert backend.timeout - 0.5 <= elapsed < 8.0, elapsed
    assert caught.value.timeout == backend.timeout
    assert caught.value.url is not None and caught.value.url.startswith(server.url)
    assert f"within {backend.timeout:g} s" in str(caught.value)
    assert 1 <= fault.sent_bytes < 20  # it did drip: the deadline, not a read timeout, cut it
    await until(lambda: fault.disconnects == 1, timeout=10, what="the client hangs up")


async def test_the_synchronous_prompt_has_its_own_deadline(
    server: FakeOpenCode, session_id: str
) -> None:
    async with OpenCodeBackend(server.url, timeout=1, prompt_timeout=2) as backend:
        start = time.monotonic()
        with pytest.raises(BackendTimeoutError) as caught:
            await bounded(backend.prompt(session_id, PromptRequest(text="[sleep:30]")))
    assert caught.value.timeout == 2
    assert 1.5 <= time.monotonic() - start < 8.0


# --- defect 5: no size cap ----------------------------------------------------------------------


@pytest.mark.parametrize("call", ["messages", "messages_raw"])
async def test_an_endless_body_is_cut_at_the_cap(
    server: FakeOpenCode, session_id: str, call: str
) -> None:
    cap = 4 * MiB
    fault = server.add_fault(f"/session/{session_id}/message", "endless")
    async with OpenCodeBackend(server.url, timeout=TIMEOUT, max_messages_bytes=cap) as backend:
        tracemalloc.start()
        try:
            with pytest.raises(BackendResponseTooLargeError) as caught:
                await bounded(calls_on(backend, session_id)[call](), guard=5)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    error = caught.value
    assert error.limit == cap
    assert cap < error.received <= cap + 4 * ENDLESS_CHUNK  # the read stopped near the cap
    assert error.url == f"{server.url}/session/{session_id}/message"
    assert f"larger than the cap of {cap} bytes" in str(error)
    assert peak < 3 * cap, f"peak {peak} bytes for a cap of {cap}"
    # the client closed the connection at the cap (it did not just stop reading)
    await until(lambda: fault.disconnects == 1, timeout=10, what="the client hangs up")


async def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    big = b"[" + b" " * (2 * MiB) + b"]"
    client = httpx.AsyncClient(
        base_url="http://opencode.test",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=big)),
    )
    backend = OpenCodeBackend("http://opencode.test", client=client, max_body_bytes=MiB)
    with pytest.raises(BackendResponseTooLargeError) as caught:
        await backend.status()
    assert (caught.value.limit, caught.value.received) == (MiB, 0)
    assert f"it declares {len(big)} bytes" in str(caught.value)


async def test_an_endless_event_line_is_cut_at_the_cap(server: FakeOpenCode) -> None:
    cap = MiB
    fault = server.add_fault("/event", "endless_sse_line")
    async with OpenCodeBackend(server.url, timeout=TIMEOUT, max_event_bytes=cap) as backend:
        with pytest.raises(BackendResponseTooLargeError) as caught:
            await bounded(anext(backend.events()), guard=5)
    assert caught.value.limit == cap
    assert cap < caught.value.received <= cap + 4 * ENDLESS_CHUNK
    assert caught.value.url == f"{server.url}/event"
    assert "stream line" in str(caught.value)
    await until(lambda: fault.disconnects == 1, timeout=10, what="the client hangs up")


async def test_an_endless_event_of_many_data_lines_is_cut_at_the_cap() -> None:
    async def lines() -> Any:
        yield b'data: {"type":"server.connected","properties":{}}\n\n'
        while True:
            yield b"data: " + b"y" * 1000 + b"\n"

    client = httpx.AsyncClient(
        base_url="http://opencode.test",
        transport=httpx.MockTransport(
            lambda request: httpx.Response(
                200, content=lines(), headers={"content-type": "text/event-stream"}
            )
        ),
    )
    backend = OpenCodeBackend("http://opencode.test", client=client, max_event_bytes=64 * 1024)
    stream = backend.events()
    assert (await anext(stream))["type"] == "server.connected"
    with pytest.raises(BackendResponseTooLargeError, match="stream event"):
        await bounded(anext(stream), guard=5)


async def test_a_dripping_event_stream_is_cut_at_the_idle_timeout(server: FakeOpenCode) -> None:
    server.add_fault("/event", "drip", interval=0.2)
    async with OpenCodeBackend(server.url, timeout=TIMEOUT, event_idle_timeout=1.5) as backend:
        start = time.monotonic()
        with pytest.raises(BackendTimeoutError) as caught:
            await bounded(anext(backend.events()))
    assert 1.0 <= time.monotonic() - start < 8.0
    assert caught.value.timeout == 1.5
    assert "no complete line for 1.5 s" in str(caught.value)


async def test_the_event_stream_still_delivers_events_and_heartbeats(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    stream = backend.events()
    assert (await bounded(anext(stream)))["type"] == "server.connected"
    assert (await bounded(anext(stream)))["type"] == "server.heartbeat"
    await backend.prompt(session_id, PromptRequest(text="hi", no_reply=True))
    event = await bounded(anext(stream))
    assert (event["type"], event["properties"]["sessionID"]) == ("message.updated", session_id)
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("status", [500, 404, 503])
async def test_event_stream_error_status_is_a_typed_error(
    server: FakeOpenCode, backend: OpenCodeBackend, status: int
) -> None:
    kind = "html404" if status == 404 else "status"
    server.add_fault("/event", kind, status=status, count=1)
    with pytest.raises(BackendHTTPError) as caught:
        await bounded(anext(backend.events()))
    assert (caught.value.status_code, caught.value.url) == (status, f"{server.url}/event")
    assert (await bounded(anext(backend.events())))["type"] == "server.connected"


# --- redirects ------------------------------------------------------------------------------------


async def test_a_redirect_on_prompt_async_is_an_error_not_a_sent_prompt(
    server: FakeOpenCode, backend: OpenCodeBackend, session_id: str
) -> None:
    server.add_fault(f"/session/{session_id}/prompt_async", "redirect", count=1)
    with pytest.raises(BackendRedirectError) as caught:
        await bounded(backend.prompt_async(session_id, PromptRequest(text="go")))
    error = caught.value
    assert (error.status_code, error.location) == (302, "http://127.0.0.1:9/elsewhere")
    assert error.url == f"{server.url}/session/{session_id}/prompt_async"
    assert "redirects are refused" in str(error)
    assert server.backend.prompts == []


@pytest.mark.parametrize("path", ["/session/status", "/event"])
async def test_redirects_are_refused_everywhere(
    server: FakeOpenCode, backend: OpenCodeBackend, path: str
) -> None:
    server.add_fault(path, "redirect", count=1)
    call = backend.status() if path != "/event" else anext(backend.events())
    with pytest.raises(BackendRedirectError):
        await bounded(call)


async def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="max_body_bytes must be positive"):
        OpenCodeBackend("http://127.0.0.1:9", max_body_bytes=0)


# --- the event follower over these errors ---------------------------------------------------------


async def test_the_event_follower_reconnects_after_typed_stream_errors(
    server: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    server.add_fault("/event", "status", status=500, count=1)
    server.add_fault("/event", "redirect", count=1)
    seen: list[str] = []
    follower = EventFollower(
        backend, lambda event: seen.append(str(event["type"])), min_backoff=0.05
    )
    follower.start()
    try:
        await asyncio.wait_for(follower.connected.wait(), 10)
    finally:
        await follower.stop()
    assert follower.connections == 1
    assert seen[0] == "server.connected"
    assert [f["hits"] for f in server.fault_stats()] == [1, 1]
