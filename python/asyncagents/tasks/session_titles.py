"""Session titles, read from the session server and kept a short while: the dashboard names a
parent session by its title (OpenCode's ``GET /session/{id}`` ``title``) rather than its id.

A title is a nicety: a read that fails, is slow or gives no text is None (the caller shows the
id), never an error. Every read has an overall deadline; the cache is bounded in entries, and
each title in characters. OpenCode retitles a session after its first exchange, so a title is
read again after `ttl` seconds (a failure after `failure_ttl`, so a down server is not asked on
every call).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from .backend import SessionBackend
from .errors import BackendError

log = logging.getLogger(__name__)

#: the longest title kept (a longer one is cut, with an ellipsis)
MAX_TITLE_CHARS = 200


class SessionTitles:
    """A bounded, expiring cache of session titles in front of `backend.get_session`."""

    def __init__(
        self,
        backend: SessionBackend,
        *,
        max_entries: int = 1024,
        ttl: float = 60.0,
        failure_ttl: float = 10.0,
        deadline: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._backend = backend
        self.max_entries = max_entries
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self.deadline = deadline
        self._clock = clock
        #: session id -> (title or None, when it expires); least recently used first
        self._cache: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        #: reads in flight, shared by concurrent callers for the same session
        self._reading: dict[str, asyncio.Future[str | None]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    async def title(self, session_id: str) -> str | None:
        """The session's title; None when the server does not say within `deadline` seconds
        (or has no such session, or gives no text)."""
        now = self._clock()
        hit = self._cache.get(session_id)
        if hit is not None and hit[1] > now:
            self._cache.move_to_end(session_id)
            return hit[0]
        pending = self._reading.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._reading[session_id] = future
        try:
            title = await self._read(session_id)
            self._keep(session_id, title)
            future.set_result(title)
        except BaseException:
            future.set_result(None)
            raise
        finally:
            del self._reading[session_id]
        return title

    async def _read(self, session_id: str) -> str | None:
        try:
            session = await asyncio.wait_for(
                self._backend.get_session(session_id), timeout=self.deadline
            )
        except (BackendError, TimeoutError) as exc:
            log.info("the title of session %s cannot be read: %s", session_id, exc)
            return None
        except Exception:  # a nicety never fails its caller (a 500 on the task's answer)
            log.exception("reading the title of session %s failed", session_id)
            return None
        title = session.get("title") if isinstance(session, dict) else None
        if not isinstance(title, str) or not title.strip():
            return None
        title = " ".join(title.split())
        if len(title) > MAX_TITLE_CHARS:
            title = title[: MAX_TITLE_CHARS - 1] + "…"
        return title

    def _keep(self, session_id: str, title: str | None) -> None:
        ttl = self.ttl if title is not None else self.failure_ttl
        self._cache[session_id] = (title, self._clock() + ttl)
        self._cache.move_to_end(session_id)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
