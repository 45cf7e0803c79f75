"""A fake ``opencode serve``: the HTTP API subset `OpenCodeBackend` uses, with fault injection.

Sessions, messages, prompts and events come from an `InProcessBackend` (OpenCode 1.18.33 shapes);
this module only puts HTTP in front of it, as OpenCode does: ``POST /session``,
``GET/DELETE /session/{id}``, ``GET /session/{id}/message[?limit=N]``,
``POST /session/{id}/message`` (with ``noReply``), ``POST /session/{id}/prompt_async`` (204),
``POST /session/{id}/abort``, ``GET /session/status``, ``GET /global/health`` and ``GET /event``
(SSE, ``server.connected`` first, ``server.heartbeat`` every `heartbeat` s). An unknown session
answers OpenCode's own 404 ``{"name": "NotFoundError", "data": {"message": "Session not found:
<id>"}}``.

In this process (uvicorn in a thread, on a free loopback port)::

    with FakeOpenCode() as server:                 # FakeOpenCode(responder=...) to script it
        backend = OpenCodeBackend(server.url)
        server.add_fault(r"/session/", "html404", seconds=3)

As its own process, which several test processes can share::

    python -m tests.fake_opencode --port 0         # from the repository root, with
                                                   # PYTHONPATH=python; prints "READY <url>"
    with FakeOpenCodeProcess() as server: ...      # starts that, waits for READY, stops it by PID

Both have ``url``, ``add_fault(...)``, ``clear_faults()``, ``fault_stats()`` and ``release()``
(other processes: ``POST <url>/_fake/faults`` with the same fields as JSON, ``DELETE
<url>/_fake/faults``, ``GET <url>/_fake/faults``, ``POST <url>/_fake/release``).

The default responder (`TagResponder`) replies ``"Reply to: <prompt>"`` and reads tags in the
prompt: ``[tool]`` records a bash step, ``[fail]`` ends the turn with a provider error,
``[sleep:S]`` waits S seconds, ``[hold]`` waits until ``release()``, ``[429:N]`` fails the first
N tries of the prompt in its session with a rate limit (HTTP 429, retryable).

Faults (`FaultKind`) answer requests whose path matches a regular expression (`re.match`, so a
plain prefix works) instead of the real API, for `count` requests or `seconds` after being
added (or until cleared): ``html404`` (a proxy's HTML 404 page), ``status`` (HTTP `status`,
default 502, with a proxy's HTML page, or OpenCode's ``UnknownError`` JSON for 500),
``not_found`` (OpenCode's NotFoundError JSON), ``drip`` (a JSON body one byte every `interval`
s), ``endless`` (a JSON body that never ends), ``endless_sse_line`` (an event stream whose first
line never ends), ``redirect`` (302 to `location`), ``delay`` (the real answer, after holding the
request `hold` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import anyio
import httpx
import uvicorn
from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    PromptRequest,
    ProviderError,
    SessionNotFoundError,
)
from asyncagents.tasks.backend import JSON
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

T = TypeVar("T")
FaultKind = Literal[
    "html404", "status", "not_found", "drip", "endless", "endless_sse_line", "redirect", "delay"
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

#: a proxy's 404 page (nginx's), as answered in the incident behind issue 9
HTML_404 = (
    b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n"
    b"<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
ENDLESS_CHUNK = 64 * 1024
REPO_ROOT = Path(__file__).resolve().parent.parent


def not_found_body(session_id: str) -> JSON:
    """OpenCode 1.18.33's answer for an unknown session (HTTP 404)."""
    return {"name": "NotFoundError", "data": {"message": f"Session not found: {session_id}"}}


# --- the default responder ------------------------------------------------------------------


def _tries(turn: InProcessTurn) -> int:
    """How many times this turn's prompt was sent in its session (this time included)."""
    return sum(
        1
        for m in turn.history
        if m["info"]["role"] == "user"
        and "".join(str(p.get("text", "")) for p in m["parts"]) == turn.prompt
    )


class TagResponder:
    """Replies by tags in the prompt: ``[tool]``, ``[fail]``, ``[sleep:S]``, ``[hold]``, and
    ``[429:N]`` (the first N tries of the prompt in its session fail with HTTP 429)."""

    _SLEEP = re.compile(r"\[sleep:([0-9.]+)\]")
    _RATE_LIMITED = re.compile(r"\[429:([0-9]+)\]")

    def __init__(self) -> None:
        self._release: asyncio.Event | None = None
        self.released = False

    def release(self) -> None:
        """Let every held turn (and every later one) go on; call it on the server's loop."""
        self.released = True
        if self._release is not None:
            self._release.set()

    async def __call__(self, turn: InProcessTurn) -> str:
        if "[tool]" in turn.prompt:
            await turn.tool("bash", {"command": "echo hi"}, "hi")
        if "[fail]" in turn.prompt:
            raise ProviderError("Invalid request: rejected by the provider")
        for seconds in self._SLEEP.findall(turn.prompt):
            await asyncio.sleep(float(seconds))
        fails = self._RATE_LIMITED.search(turn.prompt)
        if fails and _tries(turn) <= int(fails.group(1)):
            raise ProviderError("Rate limited: slow down", 429)
        if "[hold]" in turn.prompt and not self.released:
            if self._release is None:
                self._release = asyncio.Event()
            await self._release.wait()
        return "Reply to: " + turn.prompt


# --- faults -------------------------------------------------------------------------------------


@dataclass
class Fault:
    """One injected misbehaviour; `hits`, `sent_bytes` and `disconnects` count what it did."""

    path: str
    kind: FaultKind
    method: str | None = None
    count: int | None = None
    seconds: float | None = None
    status: int = 502
    interval: float = 0.5
    location: str = "http://127.0.0.1:9/elsewhere"
    #: how long a ``delay`` fault holds a request before the API answers it
    hold: float = 3.0
    hits: int = 0
    sent_bytes: int = 0
    #: streamed answers (drip, endless) the client closed before their end
    disconnects: int = 0
    added_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {self.kind!r}")
        re.compile(self.path)

    def active(self, now: float) -> bool:
        if self.count is not None and self.hits >= self.count:
            return False
        return self.seconds is None or now - self.added_at < self.seconds

    def stats(self) -> JSON:
        out = asdict(self)
        del out["added_at"]
        return out


class Faults:
    """The faults of one server; thread-safe (tests add them from another thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def stats(self) -> list[JSON]:
        with self._lock:
            return [f.stats() for f in self._faults]

    def take(self, method: str, path: str) -> Fault | None:
        """The first active fault for this request, counted as hit."""
        now = time.monotonic()
        with self._lock:
            for fault in self._faults:
                if fault.method not in (None, method) or not re.match(fault.path, path):
                    continue
                if fault.active(now):
                    fault.hits += 1
                    return fault
        return None


class _Stream(Response):
    """A streamed answer that stops as soon as the client goes away (endless bodies too)."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        status_code: int = 200,
        media_type: str = "application/json",
        on_chunk: Callable[[int], None] | None = None,
        on_disconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(status_code=status_code, media_type=media_type)
        del self.headers["content-length"]
        self._chunks = chunks
        self._on_chunk = on_chunk
        self._on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                if self._on_disconnect is not None:
                    self._on_disconnect()
                group.cancel_scope.cancel()

            group.start_soon(watch)
            with contextlib.suppress(OSError):
                async for chunk in self._chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if self._on_chunk is not None:
                        self._on_chunk(len(chunk))
                    # uvicorn drops what is sent after a disconnect without waiting: yield, so
                    # the watcher sees the disconnect and ends an endless body
                    await asyncio.sleep(0)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()


def _fault_response(fault: Fault) -> Response:
    def count(n: int) -> None:
        fault.sent_bytes += n

    def gone() -> None:
        fault.disconnects += 1

    if fault.kind == "html404":
        return Response(HTML_404, 404, media_type="text/html")
    if fault.kind == "not_found":
        return JSONResponse(not_found_body("ses_fault"), 404)
    if fault.kind == "status":
        if fault.status == 500:
            body = {"name": "UnknownError", "data": {"message": "Unexpected server error."}}
            return JSONResponse(body, 500)
        phrase = HTTPStatus(fault.status).phrase
        page = f"<html><body><h1>{fault.status} {phrase}</h1></body></html>"
        return Response(page, fault.status, media_type="text/html")
    if fault.kind == "redirect":
        return Response(b"", 302, headers={"location": fault.location})
    if fault.kind == "drip":

        async def drip() -> AsyncIterator[bytes]:
            for byte in b"[" + b" " * 100_000 + b"]":
                yield bytes([byte])
                await asyncio.sleep(fault.interval)

        return _Stream(drip(), on_chunk=count, on_disconnect=gone)
    if fault.kind == "endless":

        async def endless() -> AsyncIterator[bytes]:
            item = b'{"info":{"id":"msg_endless","role":"user"},"parts":[]},'
            chunk = item * (ENDLESS_CHUNK // len(item))
            yield b"["
            while True:
                yield chunk

        return _Stream(endless(), on_chunk=count, on_disconnect=gone)

    async def endless_line() -> AsyncIterator[bytes]:
        yield b"data: "
        chunk = b"x" * ENDLESS_CHUNK
        while True:
            yield chunk

    return _Stream(
        endless_line(), media_type="text/event-stream", on_chunk=count, on_disconnect=gone
    )


class _FaultInjector:
    """ASGI middleware: a matching fault answers instead of the app."""

    def __init__(self, app: Starlette, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/_fake/"):
            fault = self.faults.take(scope["method"], scope["path"])
            if fault is not None and fault.kind == "delay":
                await asyncio.sleep(fault.hold)
            elif fault is not None:
                await _fault_response(fault)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- the API ------------------------------------------------------------------------------------


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"name": "BadRequest", "data": {"message": message, "kind": "Body"}}, 400)


def _prompt_request(body: Any) -> PromptRequest:
    if not isinstance(body, dict) or not isinstance(body.get("parts"), list):
        raise ValueError("body must be an object with a 'parts' list")
    text = "".join(
        str(p.get("text", ""))
        for p in body["parts"]
        if isinstance(p, dict) and p.get("type") == "text"
    )
    return PromptRequest(
        text=text,
        agent=body.get("agent"),
        no_reply=bool(body.get("noReply")),
        tools=body.get("tools") or {},
        model=body.get("model"),
        message_id=body.get("messageID"),
        system=body.get("system"),
    )


def build_app(
    backend: InProcessBackend,
    faults: Faults,
    *,
    heartbeat: float = 10.0,
    release: Callable[[], None],
) -> _FaultInjector:
    """The ASGI app: OpenCode's routes over `backend`, behind the fault injector."""

    async def body_of(request: Request) -> Any:
        raw = await request.body()
        return json.loads(raw) if raw.strip() else {}

    def session_call(
        handler: Callable[[Request, str], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            sid = request.path_params["session_id"]
            try:
                return await handler(request, sid)
            except SessionNotFoundError:
                return JSONResponse(not_found_body(sid), 404)
            except ValueError as exc:
                return _bad_request(str(exc))

        return endpoint

    async def health(request: Request) -> Response:
        return JSONResponse({"healthy": True, "version": "fake"})

    async def create(request: Request) -> Response:
        try:
            body = await body_of(request)
        except ValueError as exc:
            return _bad_request(str(exc))
        if not isinstance(body, dict):
            return _bad_request("body must be an object")
        session = await backend.create_session(
            parent_id=body.get("parentID"), title=body.get("title")
        )
        return JSONResponse(session)

    async def get(request: Request, sid: str) -> Response:
        return JSONResponse(await backend.get_session(sid))

    async def delete(request: Request, sid: str) -> Response:
        await backend.delete_session(sid)
        return JSONResponse(True)

    async def messages(request: Request, sid: str) -> Response:
        limit = request.query_params.get("limit")
        items = await backend.messages(sid, limit=int(limit) if limit is not None else None)
        return JSONResponse(items)

    async def prompt(request: Request, sid: str) -> Response:
        return JSONResponse(await backend.prompt(sid, _prompt_request(await body_of(request))))

    async def prompt_async(request: Request, sid: str) -> Response:
        await backend.prompt_async(sid, _prompt_request(await body_of(request)))
        return Response(status_code=204)

    async def abort(request: Request, sid: str) -> Response:
        return JSONResponse(await backend.abort(sid))

    async def status(request: Request) -> Response:
        return JSONResponse(dict(await backend.status()))

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            queue: asyncio.Queue[JSON | None] = asyncio.Queue()
            source = backend.events()

            async def pump() -> None:
                try:
                    async for event in source:
                        await queue.put(event)
                finally:
                    await queue.put(None)

            pumping = asyncio.get_running_loop().create_task(pump())
            try:
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), heartbeat)
                    except TimeoutError:
                        event = {"id": "evt_beat", "type": "server.heartbeat", "properties": {}}
                    if event is None:
                        return
                    yield b"data: " + json.dumps(event).encode() + b"\n\n"
            finally:
                pumping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pumping
                await source.aclose()  # type: ignore[attr-defined]

        return _Stream(stream(), media_type="text/event-stream")

    async def add_fault(request: Request) -> Response:
        try:
            fault = faults.add(Fault(**await body_of(request)))
        except (TypeError, ValueError, re.error) as exc:
            return _bad_request(str(exc))
        return JSONResponse(fault.stats())

    async def clear_faults(request: Request) -> Response:
        faults.clear()
        return JSONResponse(True)

    async def list_faults(request: Request) -> Response:
        return JSONResponse(faults.stats())

    async def do_release(request: Request) -> Response:
        release()
        return JSONResponse(True)

    app = Starlette(
        routes=[
            Route("/global/health", health),
            Route("/session", create, methods=["POST"]),
            Route("/session/status", status),
            Route("/session/{session_id}", session_call(get), methods=["GET"]),
            Route("/session/{session_id}", session_call(delete), methods=["DELETE"]),
            Route("/session/{session_id}/message", session_call(messages), methods=["GET"]),
            Route("/session/{session_id}/message", session_call(prompt), methods=["POST"]),
            Route(
                "/session/{session_id}/prompt_async", session_call(prompt_async), methods=["POST"]
            ),
            Route("/session/{session_id}/abort", session_call(abort), methods=["POST"]),
            Route("/event", events),
            Route("/_fake/faults", add_fault, methods=["POST"]),
            Route("/_fake/faults", clear_faults, methods=["DELETE"]),
            Route("/_fake/faults", list_faults, methods=["GET"]),
            Route("/_fake/release", do_release, methods=["POST"]),
        ]
    )
    return _FaultInjector(app, faults)


# --- running it ---------------------------------------------------------------------------------


def _listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


#: OpenCode (Bun, ``idleTimeout: 0``) never closes an idle connection. uvicorn's default (5 s)
#: equals httpx's keep-alive expiry, so a pooled connection could be reused just as the server
#: closed it: ``ReadError`` on a POST, seen as launches failing under load in tests/workers
KEEP_ALIVE = 600


def _uvicorn(app: _FaultInjector) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE,
    )
    return uvicorn.Server(config)


class FakeOpenCode:
    """The fake server in this process: uvicorn on its own loop in a daemon thread.

    `backend` is the `InProcessBackend` behind it; `call(fn)` runs ``fn(backend)`` on the
    server's loop (to seed messages, delete sessions, flip its test knobs).
    """

    def __init__(
        self,
        responder: Callable[[InProcessTurn], Awaitable[str]] | None = None,
        *,
        heartbeat: float = 10.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder = responder or TagResponder()
        self.backend = InProcessBackend(self.responder)
        self.faults = Faults()
        self._host, self._port = host, port
        self._heartbeat = heartbeat
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.url = ""

    def start(self, timeout: float = 15.0) -> FakeOpenCode:
        sock = _listening_socket(self._host, self._port)
        self.url = f"http://{self._host}:{sock.getsockname()[1]}"
        app = build_app(
            self.backend, self.faults, heartbeat=self._heartbeat, release=self._release_here
        )
        server = self._server = _uvicorn(app)
        started = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            started.set()
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            finally:
                loop.run_until_complete(self.backend.aclose())
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=serve, name="fake-opencode", daemon=True)
        self._thread.start()
        started.wait(timeout)
        end = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > end or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"fake OpenCode server at {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        server, thread, self._thread = self._server, self._thread, None
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(10)

    def __enter__(self) -> FakeOpenCode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[InProcessBackend], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run ``fn(backend)`` on the server's loop and return its result."""
        assert self._loop is not None, "start() the fake server first"

        async def run() -> T:
            return await fn(self.backend)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def _release_here(self) -> None:
        if isinstance(self.responder, TagResponder):
            self.responder.release()

    def release(self) -> None:
        """Let the `TagResponder`'s ``[hold]`` turns finish."""
        assert self._loop is not None, "start() the fake server first"
        self._loop.call_soon_threadsafe(self._release_here)

    def add_fault(self, path: str, kind: FaultKind, **options: Any) -> Fault:
        """Answer requests whose path matches `path` with `kind` (see the module docstring)."""
        return self.faults.add(Fault(path=path, kind=kind, **options))

    def clear_faults(self) -> None:
        self.faults.clear()

    def fault_stats(self) -> list[JSON]:
        return self.faults.stats()


class FakeOpenCodeProcess:
    """The fake server as its own process (``python -m tests.fake_opencode``), stopped by PID.

    Faults and ``release()`` go over HTTP, so any process that knows `url` can use them.
    """

    def __init__(self, *, heartbeat: float = 10.0, port: int = 0) -> None:
        self._args = ["--port", str(port), "--heartbeat", str(heartbeat)]
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> FakeOpenCodeProcess:
        from subprocess_env import python_path  # tests/ is on sys.path in a test run

        env = {**os.environ, "PYTHONPATH": python_path(REPO_ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fake_opencode", *self._args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready: list[str] = []
        reader = threading.Thread(
            target=lambda: ready.append(self.process.stdout.readline() if self.process else ""),
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        line = ready[0].strip() if ready else ""
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"fake OpenCode process did not start (said {line!r})")
        self.url = line.split(" ", 1)[1]
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> FakeOpenCodeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_fault(self, path: str, kind: FaultKind, **options: Any) -> JSON:
        response = httpx.post(
            f"{self.url}/_fake/faults", json={"path": path, "kind": kind, **options}, timeout=10
        )
        response.raise_for_status()
        out: JSON = response.json()
        return out

    def clear_faults(self) -> None:
        httpx.delete(f"{self.url}/_fake/faults", timeout=10).raise_for_status()

    def fault_stats(self) -> list[JSON]:
        response = httpx.get(f"{self.url}/_fake/faults", timeout=10)
        response.raise_for_status()
        out: list[JSON] = response.json()
        return out

    def release(self) -> None:
        httpx.post(f"{self.url}/_fake/release", timeout=10).raise_for_status()


@contextlib.contextmanager
def fake_opencode(**options: Any) -> Iterator[FakeOpenCode]:
    """``with fake_opencode() as server:``: a started in-thread server, stopped after."""
    with FakeOpenCode(**options) as server:
        yield server


async def _serve_forever(host: str, port: int, heartbeat: float) -> None:
    responder = TagResponder()
    backend = InProcessBackend(responder)
    sock = _listening_socket(host, port)
    server = _uvicorn(build_app(backend, Faults(), heartbeat=heartbeat, release=responder.release))

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"READY http://{host}:{sock.getsockname()[1]}", flush=True)

    announcing = asyncio.get_running_loop().create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcing.cancel()
        await backend.aclose()
        sock.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake `opencode serve` for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--heartbeat", type=float, default=10.0, help="seconds between heartbeats")
    args = parser.parse_args(argv)
    asyncio.run(_serve_forever(args.host, args.port, args.heartbeat))


if __name__ == "__main__":
    main()
