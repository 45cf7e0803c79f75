"""`OpenCodeBackend`: the `SessionBackend` over a running ``opencode serve`` (HTTP + SSE).

Every call is bounded: one overall deadline (connect, send and the whole body), a size cap on
every body and on every line and event of the stream, and redirects refused. Every failure is a
typed `BackendError` naming the method and the URL. A session is reported gone
(`SessionNotFoundError`) only on OpenCode's own answer, HTTP 404 with its ``NotFoundError`` JSON
(``{"name": "NotFoundError", "data": {"message": "Session not found: ses_..."}}``), confirmed by
a second ``GET /session/{id}``: an HTML 404 page from a proxy, a 5xx, a body that is not JSON or
a timeout is a passing failure that must not make the caller drop anything.

A server started with ``OPENCODE_SERVER_PASSWORD`` wants HTTP basic auth on every route (the
event stream too); `OpenCodeCredentials` carries it, from the same environment variables by
default. Its refusal (HTTP 401 or 403) is a `BackendAuthError`: a setup problem, said once in
the log and in every answer with how to fix it, never a passing failure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import anyio
import httpx
from httpx._client import UseClientDefault

from .backend import JSON, PromptRequest
from .errors import (
    BackendAuthError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendRedirectError,
    BackendResponseTooLargeError,
    BackendTimeoutError,
    BackendUnavailableError,
    SessionNotFoundError,
)

MiB = 1024 * 1024
#: cap of every answer except message lists (sessions, status, prompt acks)
DEFAULT_MAX_BODY_BYTES = 16 * MiB
#: cap of ``GET /session/{id}/message`` and of the synchronous prompt's answer: real sessions
#: with big tool outputs reach tens of MiB
DEFAULT_MAX_MESSAGES_BYTES = 256 * MiB
#: cap of one line, and of one event, of the ``/event`` stream
DEFAULT_MAX_EVENT_BYTES = 16 * MiB
#: how much of an error answer is read (for its message); the rest is dropped
ERROR_BODY_BYTES = 64 * 1024

_JSON_START = re.compile(rb"\s*\[")

log = logging.getLogger(__name__)

#: the environment variables ``opencode serve`` reads its credentials from
PASSWORD_ENV = "OPENCODE_SERVER_PASSWORD"
USERNAME_ENV = "OPENCODE_SERVER_USERNAME"
#: OpenCode's username when ``OPENCODE_SERVER_USERNAME`` is not set
DEFAULT_USERNAME = "opencode"
#: the longest password file read
MAX_PASSWORD_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class OpenCodeCredentials:
    """The username and password of a secured ``opencode serve`` (HTTP basic auth, as OpenCode
    checks it). The password never shows in `repr`; an empty one means no auth."""

    username: str = DEFAULT_USERNAME
    password: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenCodeCredentials | None:
        """``$OPENCODE_SERVER_PASSWORD`` and ``$OPENCODE_SERVER_USERNAME`` (default
        ``opencode``), as ``opencode serve`` reads them; None when no password is set."""
        env = os.environ if environ is None else environ
        password = env.get(PASSWORD_ENV, "")
        if not password:
            return None
        return cls(env.get(USERNAME_ENV) or DEFAULT_USERNAME, password)

    @classmethod
    def from_file(cls, path: Path, username: str | None = None) -> OpenCodeCredentials:
        """The password in the file at `path` (its first line), with `username` (default:
        ``$OPENCODE_SERVER_USERNAME``, else ``opencode``). Raises `ValueError` naming the file
        when it cannot be read or holds no password."""
        try:
            with open(path, "rb") as file:
                raw = file.read(MAX_PASSWORD_FILE_BYTES + 1)
        except OSError as exc:
            raise ValueError(
                f"cannot read the OpenCode password file {str(path)!r}: "
                f"{exc.strerror or type(exc).__name__}"
            ) from None
        if len(raw) > MAX_PASSWORD_FILE_BYTES:
            raise ValueError(
                f"the OpenCode password file {str(path)!r} is over {MAX_PASSWORD_FILE_BYTES} bytes"
            )
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"the OpenCode password file {str(path)!r} is not UTF-8") from None
        password = lines[0].strip("\r") if lines else ""
        if not password:
            raise ValueError(f"the OpenCode password file {str(path)!r} holds no password")
        name = username or os.environ.get(USERNAME_ENV) or DEFAULT_USERNAME
        return cls(name, password)

    def auth(self) -> httpx.Auth | None:
        """The HTTP basic auth to send, or None without a password."""
        return httpx.BasicAuth(self.username, self.password) if self.password else None


def auth_refused(
    base_url: str, status: int, method: str, url: str, credentials: OpenCodeCredentials | None
) -> str:
    """What a refusal (HTTP 401 or 403) means and how to fix it; never the password."""
    if credentials is None or not credentials.password:
        why = "it is protected by a password and none was given"
    else:
        why = f'it does not accept the username "{credentials.username}" and the password given'
    return (
        f"OpenCode server at {base_url} refused {method} {url} with HTTP {status}: {why}. "
        f"This is a setup problem that retrying will not fix: set {PASSWORD_ENV} (and "
        f'{USERNAME_ENV} if it is not "{DEFAULT_USERNAME}") to the credentials `opencode serve` '
        "runs with, in the environment of `asyncagents serve` (or give it "
        "--opencode-password-file), and restart it."
    )


@dataclass(frozen=True)
class _Answer:
    """One HTTP answer, read whole (within its cap)."""

    method: str
    url: str
    status: int
    content_type: str
    body: bytes


def _unusable(answer: _Answer, what: str) -> BackendProtocolError:
    """The server answered with a body the backend cannot use; `what` says what it was."""
    return BackendProtocolError(
        f"OpenCode server answered {answer.method} {answer.url} with {what} ({_detail(answer)}).",
        answer.status,
        url=answer.url,
        method=answer.method,
    )


def _session_path(session_id: str, tail: str = "") -> str:
    """``/session/{id}{tail}`` with the id quoted (an id never walks to another path)."""
    return f"/session/{quote(session_id, safe='')}{tail}"


def _not_found_message(answer: _Answer) -> str | None:
    """OpenCode's own not-found answer's message: HTTP 404 with
    ``{"name": "NotFoundError", "data": {"message": ...}}``; None for anything else."""
    if answer.status != 404:
        return None
    try:
        body = json.loads(answer.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("name") != "NotFoundError":
        return None
    data = body.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else None


def _detail(answer: _Answer) -> str:
    """A short description of an error answer: OpenCode's message, or what the body is."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if isinstance(body, dict):
        data = body.get("data")
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return f"{body.get('name') or 'error'}: {data['message']}"
    snippet = answer.body[:200].decode("utf-8", "replace").strip()
    kind = answer.content_type or "no content type"
    return f"{kind} body {snippet!r}" if snippet else f"empty {kind} body"


class OpenCodeBackend:
    """Talks to ``opencode serve`` through one pooled `httpx.AsyncClient`.

    Deadlines: `timeout` bounds each ordinary call as a whole (connect, send, the full body);
    a synchronous prompt that waits for the model's reply (``prompt`` without ``no_reply``) gets
    `prompt_timeout`; `connect_timeout` bounds the connection within either. The event stream
    is bounded by `timeout` until its headers arrive, then fails when no complete line arrives
    for `event_idle_timeout` s (the server sends a heartbeat every ~10 s, so a silent or
    dripping stream is a dead one).

    Size caps: `max_messages_bytes` for message lists and the synchronous prompt's answer,
    `max_body_bytes` for every other answer, `max_event_bytes` for one line or event of the
    stream; past a cap the read stops and `BackendResponseTooLargeError` names the URL and cap.

    Redirects are never followed (`BackendRedirectError`). `directory` selects the project
    instance on a server that serves several.

    `credentials` are sent with every request (basic auth); None reads them from
    ``$OPENCODE_SERVER_PASSWORD`` / ``$OPENCODE_SERVER_USERNAME`` as ``opencode serve`` does.
    A 401 or 403 raises `BackendAuthError`, logged once (until a call succeeds again).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        prompt_timeout: float = 120.0,
        event_idle_timeout: float = 45.0,
        directory: str | None = None,
        max_connections: int = 64,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_messages_bytes: int = DEFAULT_MAX_MESSAGES_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        credentials: OpenCodeCredentials | None = None,
    ) -> None:
        for name, value in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("prompt_timeout", prompt_timeout),
            ("event_idle_timeout", event_idle_timeout),
            ("max_body_bytes", max_body_bytes),
            ("max_messages_bytes", max_messages_bytes),
            ("max_event_bytes", max_event_bytes),
        ):
            if not value > 0:
                raise ValueError(f"OpenCodeBackend: {name} must be positive, got {value!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.prompt_timeout = prompt_timeout
        self.event_idle_timeout = event_idle_timeout
        self.max_body_bytes = max_body_bytes
        self.max_messages_bytes = max_messages_bytes
        self.max_event_bytes = max_event_bytes
        self._params = {"directory": directory} if directory else {}
        self.credentials = (
            credentials if credentials is not None else OpenCodeCredentials.from_env()
        )
        auth = self.credentials.auth() if self.credentials is not None else None
        #: the ``auth`` of every request (none: a given client's own default applies)
        self._auth: httpx.Auth | UseClientDefault = (
            auth if auth is not None else httpx.USE_CLIENT_DEFAULT
        )
        self._refusal_logged = False
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers=dict(headers or {}),
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    @property
    def name(self) -> str:
        """The manager's default backend name: the server's URL, the same in every process
        that talks to it (they all see its sessions, so they may share its tasks)."""
        return self.base_url

    @property
    def refusing(self) -> bool:
        """The server refused our credentials at the last answer, and nothing succeeded since
        (`TaskManager.task` then hears of it at once instead of in a notice)."""
        return self._refusal_logged

    async def __aenter__(self) -> OpenCodeBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- one bounded request --------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _transport_failure(
        self, exc: httpx.HTTPError, method: str, url: str, limit: float
    ) -> BackendError:
        if isinstance(exc, httpx.TimeoutException):
            if isinstance(exc, httpx.ConnectTimeout):
                limit = min(self.connect_timeout, limit)
            return BackendTimeoutError(
                f"OpenCode server at {self.base_url} timed out on {method} {url} "
                f"({type(exc).__name__} after {limit:g} s). Try again shortly.",
                timeout=limit,
                url=url,
                method=method,
            )
        if isinstance(exc, httpx.TransportError):
            return BackendUnavailableError(
                f"OpenCode server at {self.base_url} is not reachable ({method} {url}: "
                f"{type(exc).__name__}: {exc}). Check that `opencode serve` is running on that "
                "address.",
                url=url,
                method=method,
            )
        return BackendProtocolError(
            f"OpenCode server at {self.base_url} sent an answer to {method} {url} that could "
            f"not be read ({type(exc).__name__}: {exc}).",
            url=url,
            method=method,
        )

    def _deadline_passed(self, method: str, url: str, limit: float) -> BackendTimeoutError:
        return BackendTimeoutError(
            f"OpenCode server at {self.base_url} did not answer {method} {url} within "
            f"{limit:g} s (the whole call: connect, send and the full body). Try again shortly.",
            timeout=limit,
            url=url,
            method=method,
        )

    def _redirect(self, response: httpx.Response, method: str, url: str) -> BackendRedirectError:
        location = response.headers.get("location")
        return BackendRedirectError(
            f"OpenCode server at {self.base_url} answered {method} {url} with a redirect "
            f"(HTTP {response.status_code} to {location or 'nowhere'}); redirects are refused. "
            "Point the backend at the server itself, not at a proxy that redirects.",
            response.status_code,
            location=location,
            url=url,
            method=method,
        )

    async def _read(
        self, response: httpx.Response, method: str, url: str, cap: int, *, truncate: bool
    ) -> bytes:
        """The body, chunk by chunk, stopping past `cap` (an error, or a cut when `truncate`)."""
        declared = response.headers.get("content-length", "")
        if not truncate and declared.isdigit() and int(declared) > cap:
            raise self._too_large(method, url, cap, 0, f"it declares {int(declared)} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                if truncate:
                    break
                raise self._too_large(method, url, cap, size, f"read stopped at {size} bytes")
        return b"".join(chunks)

    def _too_large(
        self, method: str, url: str, cap: int, received: int, how: str, what: str = "body"
    ) -> BackendResponseTooLargeError:
        return BackendResponseTooLargeError(
            f"OpenCode server at {self.base_url} sent a {what} for {method} {url} larger than "
            f"the cap of {cap} bytes ({how}). Raise the backend's size cap if this is a real "
            "session.",
            limit=cap,
            received=received,
            url=url,
            method=method,
        )

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> _Answer:
        """One request under one overall deadline, its body read within its cap; a redirect
        raises. Any status is returned (the caller decides what an error means)."""
        limit = self.timeout if timeout is None else timeout
        cap = self.max_body_bytes if max_bytes is None else max_bytes
        url = self._url(path)
        query: dict[str, str | int] = {**self._params, **(params or {})}
        try:
            with anyio.fail_after(limit):
                async with self._client.stream(
                    method,
                    path,
                    json=json_body,
                    params=query or None,
                    timeout=httpx.Timeout(limit, connect=min(self.connect_timeout, limit)),
                    follow_redirects=False,
                    auth=self._auth,
                ) as response:
                    if response.is_redirect or 300 <= response.status_code < 400:
                        raise self._redirect(response, method, url)
                    ok = response.is_success
                    body = await self._read(
                        response, method, url, cap if ok else ERROR_BODY_BYTES, truncate=not ok
                    )
                    return _Answer(
                        method,
                        url,
                        response.status_code,
                        response.headers.get("content-type", ""),
                        body,
                    )
        except TimeoutError as exc:
            raise self._deadline_passed(method, url, limit) from exc
        except httpx.HTTPError as exc:
            raise self._transport_failure(exc, method, url, limit) from exc

    async def _call(
        self,
        method: str,
        path: str,
        *,
        session_id: str | None = None,
        json_body: Any = None,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> _Answer:
        """`_send`, then any answer but 2xx raised as a typed error. A call about a session
        (`session_id`) that OpenCode answers with its NotFoundError is confirmed by a second
        read before `SessionNotFoundError` is raised."""
        answer = await self._send(
            method, path, json_body=json_body, params=params, timeout=timeout, max_bytes=max_bytes
        )
        if 200 <= answer.status < 300:
            self._refusal_logged = False
            return answer
        message = _not_found_message(answer)
        if message is not None and session_id is not None:
            await self._confirm_gone(session_id, answer, message)
        raise self._status_error(answer)

    def _status_error(self, answer: _Answer) -> BackendError:
        if answer.status in (401, 403):
            return self._refused(answer)
        what = ""
        if answer.status == 404 and _not_found_message(answer) is None:
            what = " (not OpenCode's NotFoundError answer, so nothing is taken as gone)"
        return BackendHTTPError(
            f"OpenCode server at {self.base_url} answered {answer.method} {answer.url} with "
            f"HTTP {answer.status}{what}: {_detail(answer)}. This is treated as a passing "
            "failure; try again shortly.",
            answer.status,
            url=answer.url,
            method=answer.method,
        )

    def _refused(self, answer: _Answer) -> BackendAuthError:
        """The server wants other credentials: said in the log once, until a call succeeds."""
        message = auth_refused(
            self.base_url, answer.status, answer.method, answer.url, self.credentials
        )
        if not self._refusal_logged:
            self._refusal_logged = True
            log.error("%s", message)
        return BackendAuthError(message, answer.status, url=answer.url, method=answer.method)

    async def _confirm_gone(self, session_id: str, first: _Answer, message: str) -> None:
        """Raise `SessionNotFoundError` when ``GET /session/{id}`` again answers OpenCode's
        NotFoundError; otherwise a `BackendHTTPError` for the first answer (passing)."""
        path = _session_path(session_id)
        url = self._url(path)
        try:
            second = await self._send("GET", path)
        except BackendError as exc:
            raise BackendHTTPError(
                f"OpenCode server at {self.base_url} answered {first.method} {first.url} with "
                f"NotFoundError ({message}), but the second read to confirm it failed ({exc}); "
                "the session is not taken as gone. Try again shortly.",
                404,
                url=first.url,
                method=first.method,
            ) from exc
        if _not_found_message(second) is not None:
            # OpenCode's own text ("Session not found: <id>") is what an agent reads; the
            # request is in `url` and `method`
            raise SessionNotFoundError(session_id, message, url=first.url, method=first.method)
        seen = "the session exists" if 200 <= second.status < 300 else f"HTTP {second.status}"
        raise BackendHTTPError(
            f"OpenCode server at {self.base_url} answered {first.method} {first.url} with "
            f"NotFoundError ({message}), but the second read GET {url} answered {seen}; the "
            "session is not taken as gone. Try again shortly.",
            404,
            url=first.url,
            method=first.method,
        )

    @staticmethod
    def _json(answer: _Answer, expect: type | tuple[type, ...]) -> Any:
        try:
            value = json.loads(answer.body)
        except ValueError as exc:
            raise _unusable(answer, "a body that is not JSON") from exc
        if not isinstance(value, expect):
            names = (
                expect.__name__
                if isinstance(expect, type)
                else "/".join(t.__name__ for t in expect)
            )
            raise _unusable(answer, f"JSON of type {type(value).__name__}, expected {names}")
        return value

    @classmethod
    def _no_body(cls, answer: _Answer) -> None:
        """An acknowledgement: an empty body or JSON (an HTML page means another server)."""
        if answer.body.strip():
            cls._json(answer, object)

    # -- the SessionBackend calls -----------------------------------------------------------------

    async def health(self) -> JSON:
        """``GET /global/health`` (``{"healthy": true, "version": ...}``)."""
        out: JSON = self._json(await self._call("GET", "/global/health"), dict)
        return out

    async def create_session(
        self, *, parent_id: str | None = None, title: str | None = None
    ) -> JSON:
        body: JSON = {}
        if parent_id:
            body["parentID"] = parent_id
        if title:
            body["title"] = title
        out: JSON = self._json(await self._call("POST", "/session", json_body=body), dict)
        return out

    async def get_session(self, session_id: str) -> JSON:
        out: JSON = self._json(
            await self._call("GET", _session_path(session_id), session_id=session_id), dict
        )
        return out

    async def delete_session(self, session_id: str) -> None:
        self._no_body(await self._call("DELETE", _session_path(session_id), session_id=session_id))

    async def messages(self, session_id: str, *, limit: int | None = None) -> list[JSON]:
        params = {"limit": limit} if limit is not None else None
        answer = await self._call(
            "GET",
            _session_path(session_id, "/message"),
            session_id=session_id,
            params=params,
            max_bytes=self.max_messages_bytes,
        )
        out: list[JSON] = self._json(answer, list)
        return out

    async def messages_raw(self, session_id: str) -> bytes:
        """The message list's bytes as served (checked to start as a JSON array, not parsed)."""
        answer = await self._call(
            "GET",
            _session_path(session_id, "/message"),
            session_id=session_id,
            max_bytes=self.max_messages_bytes,
        )
        if not _JSON_START.match(answer.body):
            raise _unusable(answer, "a body that is not a JSON array")
        return answer.body

    async def prompt(self, session_id: str, request: PromptRequest) -> JSON:
        answer = await self._call(
            "POST",
            _session_path(session_id, "/message"),
            session_id=session_id,
            json_body=request.body(),
            timeout=self.timeout if request.no_reply else self.prompt_timeout,
            max_bytes=self.max_messages_bytes,
        )
        out: JSON = self._json(answer, dict)
        return out

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        self._no_body(
            await self._call(
                "POST",
                _session_path(session_id, "/prompt_async"),
                session_id=session_id,
                json_body=request.body(),
            )
        )

    async def abort(self, session_id: str) -> bool:
        answer = await self._call(
            "POST", _session_path(session_id, "/abort"), session_id=session_id
        )
        return bool(self._json(answer, object))

    async def status(self) -> Mapping[str, JSON]:
        out: dict[str, JSON] = self._json(await self._call("GET", "/session/status"), dict)
        return out

    async def providers(self) -> JSON:
        out: JSON = self._json(await self._call("GET", "/config/providers"), dict)
        return out

    async def server_config(self) -> JSON:
        out: JSON = self._json(await self._call("GET", "/config"), dict)
        return out

    # -- the event stream -------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[JSON]:
        """One SSE connection to ``/event``; each event's ``data:`` lines are one JSON object.

        It raises a typed `BackendError` when the stream cannot be opened (non-2xx, redirect,
        no answer within `timeout`), when no complete line arrives for `event_idle_timeout` s,
        and when a line or an event passes `max_event_bytes`.
        """
        method, url = "GET", self._url("/event")
        timeout = httpx.Timeout(
            self.timeout,
            connect=min(self.connect_timeout, self.timeout),
            read=self.event_idle_timeout,
        )
        streaming = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                with anyio.fail_after(self.timeout):
                    response = await stack.enter_async_context(
                        self._client.stream(
                            method,
                            "/event",
                            params=self._params or None,
                            timeout=timeout,
                            headers={"accept": "text/event-stream"},
                            follow_redirects=False,
                            auth=self._auth,
                        )
                    )
                    if response.is_redirect or 300 <= response.status_code < 400:
                        raise self._redirect(response, method, url)
                    if not response.is_success:
                        body = await self._read(
                            response, method, url, ERROR_BODY_BYTES, truncate=True
                        )
                        content_type = response.headers.get("content-type", "")
                        raise self._status_error(
                            _Answer(method, url, response.status_code, content_type, body)
                        )
                streaming = True
                self._refusal_logged = False
                async for event in self._read_events(response, url):
                    yield event
        except TimeoutError as exc:
            if not streaming:
                raise self._deadline_passed(method, url, self.timeout) from exc
            raise BackendTimeoutError(
                f"OpenCode event stream {method} {url} sent no complete line for "
                f"{self.event_idle_timeout:g} s (the server sends a heartbeat every ~10 s); "
                "reconnect.",
                timeout=self.event_idle_timeout,
                url=url,
                method=method,
            ) from exc
        except httpx.HTTPError as exc:
            limit = self.event_idle_timeout if streaming else self.timeout
            raise self._transport_failure(exc, method, url, limit) from exc

    async def _read_events(self, response: httpx.Response, url: str) -> AsyncIterator[JSON]:
        """SSE framing over the raw chunks, with a deadline per line and a cap per line and
        per event (``httpx``'s own line reader would buffer an endless line whole)."""
        cap = self.max_event_bytes
        idle = self.event_idle_timeout
        chunks = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
        pending = bytearray()
        data: list[bytes] = []
        data_size = 0
        deadline = anyio.current_time() + idle
        try:
            while True:
                with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                pending += chunk
                start = 0
                while (end := pending.find(b"\n", start)) >= 0:
                    line = bytes(pending[start:end]).rstrip(b"\r")
                    start = end + 1
                    deadline = anyio.current_time() + idle
                    if line.startswith(b"data:"):
                        value = line[5:]
                        data.append(value[1:] if value.startswith(b" ") else value)
                        data_size += len(value)
                        if data_size > cap:
                            raise self._too_large(
                                "GET", url, cap, data_size, "its data lines", "stream event"
                            )
                    elif not line and data:
                        payload = b"\n".join(data)
                        data, data_size = [], 0
                        try:
                            event = json.loads(payload)
                        except ValueError:
                            continue
                        if isinstance(event, dict):
                            yield event
                del pending[:start]
                if len(pending) > cap:
                    raise self._too_large(
                        "GET", url, cap, len(pending), "a line without its end", "stream line"
                    )
        finally:
            await chunks.aclose()

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()
