"""Closing a client's connection at once, from inside the app.

ASGI has no way for an app to hang up: a response that ends early is closed by uvicorn with
``transport.close()``, which first waits to flush what is buffered, so a client that stopped
reading keeps the connection (and the buffered bytes) forever. `asyncagents serve` runs uvicorn
with `AbortableProtocol`, which hands each request an ``abort`` callable in
``scope["extensions"][ABORT_EXTENSION]``; `abort_connection` calls it (the socket is reset,
whatever is buffered is discarded). Under other servers the extension is missing and the
response just ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.auto import AutoHTTPProtocol

#: the key of the abort callable in ``scope["extensions"]``
ABORT_EXTENSION = "asyncagents.abort"


class _WithAbort:
    """The app of one connection: each HTTP request's scope gets the connection's abort."""

    def __init__(self, app: ASGIApp, abort: Callable[[], None]) -> None:
        self.app = app
        self.abort = abort

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            extensions = dict(scope.get("extensions") or {})
            extensions[ABORT_EXTENSION] = self.abort
            scope = {**scope, "extensions": extensions}
        await self.app(scope, receive, send)


class AbortableProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol whose requests can abort their connection (module docstring)."""

    app: Any
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.app = _WithAbort(self.app, self.transport.abort)


async def abort_connection(scope: Scope) -> bool:
    """Reset the request's connection now, if the server offers it; whether it did."""
    abort = (scope.get("extensions") or {}).get(ABORT_EXTENSION)
    if abort is None:
        return False
    abort()
    # let the server see the connection lost before the app returns (else it reports a
    # response that was never completed)
    await asyncio.sleep(0)
    return True
