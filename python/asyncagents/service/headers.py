"""Headers every answer of the service carries."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import NOSNIFF

_NOSNIFF = (NOSNIFF[0].lower().encode("latin-1"), NOSNIFF[1].encode("latin-1"))


class NoSniff:
    """ASGI middleware: ``X-Content-Type-Options: nosniff`` on every HTTP answer (pages,
    static files, JSON, event streams, errors), so a browser never reads an answer as another
    type than the one it declares."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers") or ()
                    if name.lower() != _NOSNIFF[0]
                ]
                message = {**message, "headers": [*headers, _NOSNIFF]}
            await send(message)

        await self.app(scope, receive, send_with_header)
