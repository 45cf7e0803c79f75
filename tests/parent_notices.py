"""What a parent session received from the task manager, read through any `SessionBackend`
(the in-process one or a real OpenCode server)."""

from __future__ import annotations

import re
from typing import Any

from asyncagents.tasks import SessionBackend

NOTICE_PREFIX = "[asyncagents notice"


def texts(message: dict[str, Any]) -> list[str]:
    """The text parts of one message."""
    return [
        str(p.get("text", ""))
        for p in message.get("parts") or ()
        if isinstance(p, dict) and p.get("type") == "text"
    ]


_SPLIT = re.compile(r"\n\n(?=\[asyncagents notice )")


async def deliveries_in(backend: SessionBackend, session_id: str) -> list[str]:
    """The delivery prompts a parent received (one or more notices each), oldest first."""
    out: list[str] = []
    for message in await backend.messages(session_id):
        out.extend(t for t in texts(message) if t.startswith(NOTICE_PREFIX))
    return out


async def notices_in(backend: SessionBackend, session_id: str) -> list[str]:
    """The notice texts a parent session received, oldest first (a delivery of several
    notices is split at each notice's tag line; the last keeps the delivery's final line)."""
    out: list[str] = []
    for delivery in await deliveries_in(backend, session_id):
        out.extend(_SPLIT.split(delivery))
    return out
