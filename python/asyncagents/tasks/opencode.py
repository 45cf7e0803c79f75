"""`OpenCodeBackend`: the `SessionBackend` over a running ``opencode serve`` (HTTP + SSE)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from .backend import JSON, PromptRequest
from .errors import BackendError, BackendUnavailableError, SessionNotFoundError

_SESSION_IN_PATH = re.compile(r"/session/([^/]+)")


class OpenCodeBackend:
    """Talks to ``opencode serve`` through one pooled `httpx.AsyncClient`.

    `timeout` bounds ordinary calls; a synchronous prompt (used only for ``noReply`` injections)
    gets `prompt_timeout`; the event stream has no read timeout beyond `event_idle_timeout`
    (the server sends a heartbeat every ~10 s, so a silent stream is a dead one). `directory`
    selects the project instance on a server that serves several. Connection failures raise
    `BackendUnavailableError` naming the URL, so an agent sees "server down", not a traceback.
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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._prompt_timeout = httpx.Timeout(prompt_timeout, connect=connect_timeout)
        self._event_timeout = httpx.Timeout(
            connect_timeout, connect=connect_timeout, read=event_idle_timeout
        )
        self._params = {"directory": directory} if directory else {}
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            base_url=self.base_url,
            timeout=self._timeout,
            headers=dict(headers or {}),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def __aenter__(self) -> OpenCodeBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _unavailable(self, exc: Exception, what: str) -> BackendUnavailableError:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "is not reachable"
        return BackendUnavailableError(
            f"OpenCode server at {self.base_url} {kind} ({what}: {type(exc).__name__}: {exc}). "
            "Check that `opencode serve` is running on that address."
        )

    def _check(self, response: httpx.Response, what: str) -> None:
        if response.status_code < 400:
            return
        text = response.text
        message = text[:500]
        try:
            body = response.json()
            data = body.get("data") if isinstance(body, dict) else None
            if isinstance(data, dict) and data.get("message"):
                message = str(data["message"])
        except ValueError:
            pass
        if response.status_code == 404:
            found = _SESSION_IN_PATH.search(response.request.url.path)
            raise SessionNotFoundError(found.group(1) if found else "?", message)
        raise BackendError(
            f"OpenCode {what} failed with HTTP {response.status_code}: {message}",
            response.status_code,
        )

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str | int] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        what = f"{method} {path}"
        query: dict[str, str | int] = {**self._params, **(params or {})}
        try:
            response = await self._client.request(
                method,
                path,
                json=json_body,
                params=query or None,
                timeout=timeout or self._timeout,
            )
        except httpx.TransportError as exc:
            raise self._unavailable(exc, what) from exc
        self._check(response, what)
        return response

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise BackendError(
                f"OpenCode sent a body that is not JSON: {response.text[:200]}"
            ) from exc

    async def health(self) -> JSON:
        """``GET /global/health`` (``{"healthy": true, "version": ...}``)."""
        out: JSON = self._json(await self._request("GET", "/global/health"))
        return out

    async def create_session(
        self, *, parent_id: str | None = None, title: str | None = None
    ) -> JSON:
        body: JSON = {}
        if parent_id:
            body["parentID"] = parent_id
        if title:
            body["title"] = title
        out: JSON = self._json(await self._request("POST", "/session", json_body=body))
        return out

    async def get_session(self, session_id: str) -> JSON:
        out: JSON = self._json(await self._request("GET", f"/session/{session_id}"))
        return out

    async def delete_session(self, session_id: str) -> None:
        await self._request("DELETE", f"/session/{session_id}")

    async def messages(self, session_id: str, *, limit: int | None = None) -> list[JSON]:
        params = {"limit": limit} if limit is not None else None
        out: list[JSON] = self._json(
            await self._request("GET", f"/session/{session_id}/message", params=params)
        )
        return out

    async def messages_raw(self, session_id: str) -> bytes:
        response = await self._request("GET", f"/session/{session_id}/message")
        return response.content

    async def prompt(self, session_id: str, request: PromptRequest) -> JSON:
        timeout = self._timeout if request.no_reply else self._prompt_timeout
        out: JSON = self._json(
            await self._request(
                "POST", f"/session/{session_id}/message", json_body=request.body(), timeout=timeout
            )
        )
        return out

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        await self._request("POST", f"/session/{session_id}/prompt_async", json_body=request.body())

    async def abort(self, session_id: str) -> bool:
        return bool(self._json(await self._request("POST", f"/session/{session_id}/abort")))

    async def status(self) -> Mapping[str, JSON]:
        out: dict[str, JSON] = self._json(await self._request("GET", "/session/status"))
        return out

    async def events(self) -> AsyncIterator[JSON]:
        """One SSE connection to ``/event``; each ``data:`` line is one event object."""
        try:
            async with self._client.stream(
                "GET",
                "/event",
                params=self._params or None,
                timeout=self._event_timeout,
                headers={"accept": "text/event-stream"},
            ) as response:
                self._check(response, "GET /event")
                data: list[str] = []
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        payload = "\n".join(data)
                        data = []
                        try:
                            event = json.loads(payload)
                        except ValueError:
                            continue
                        if isinstance(event, dict):
                            yield event
        except httpx.TransportError as exc:
            raise self._unavailable(exc, "GET /event") from exc

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()
