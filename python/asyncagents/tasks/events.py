"""Following the server's event stream for as long as the manager lives, reconnecting on drops.

Events are hints, never proof: after every (re)connection `on_connect` runs so the manager can
re-check what it may have missed while the stream was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from .backend import JSON, SessionBackend

log = logging.getLogger(__name__)


def event_type(event: JSON) -> str:
    """The event's type (``session.idle`` ...)."""
    return str(event.get("type") or "")


def event_properties(event: JSON) -> JSON:
    """The event's payload: ``properties`` in the classic stream, ``data`` in the v2 one."""
    props: Any = event.get("properties")
    if not isinstance(props, dict):
        props = event.get("data")
    return props if isinstance(props, dict) else {}


def event_session_id(event: JSON) -> str | None:
    """The session an event is about, where it says."""
    props = event_properties(event)
    sid = props.get("sessionID")
    if isinstance(sid, str):
        return sid
    for key in ("info", "part"):
        inner = props.get(key)
        if isinstance(inner, dict):
            value = inner.get("sessionID") or (inner.get("id") if key == "info" else None)
            if isinstance(value, str) and value.startswith("ses"):
                return value
    return None


class EventFollower:
    """Reads `backend.events()` in a loop; calls `handler` per event (it must not block).

    On a drop it waits (exponential backoff from `min_backoff` to `max_backoff`) and
    reconnects; `connected` is set while a stream is open, `connections` counts them.
    """

    def __init__(
        self,
        backend: SessionBackend,
        handler: Callable[[JSON], None],
        *,
        on_connect: Callable[[], Coroutine[Any, Any, None]] | None = None,
        min_backoff: float = 0.1,
        max_backoff: float = 5.0,
    ) -> None:
        self._backend = backend
        self._handler = handler
        self._on_connect = on_connect
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.connections = 0
        self.last_error: str | None = None
        self._side: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start following (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="event-follower")

    async def stop(self) -> None:
        """Stop following and close the stream."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.connected.clear()

    async def _run(self) -> None:
        backoff = self._min_backoff
        while True:
            try:
                stream = self._backend.events()
                try:
                    async for event in stream:
                        if not self.connected.is_set():
                            self.connected.set()
                            self.connections += 1
                            backoff = self._min_backoff
                            if self._on_connect is not None:
                                side = asyncio.get_running_loop().create_task(self._on_connect())
                                self._side.add(side)
                                side.add_done_callback(self._side.discard)
                        try:
                            self._handler(event)
                        except Exception:
                            log.exception("event handler failed on %s", event_type(event))
                finally:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        with contextlib.suppress(Exception):
                            await aclose()
                self.last_error = "stream ended"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.info("event stream dropped: %s", self.last_error)
            self.connected.clear()
            await asyncio.sleep(backoff)
            backoff = min(self._max_backoff, backoff * 2)
