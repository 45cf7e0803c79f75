"""What a parent session received from the task manager, read through any `SessionBackend`
(the in-process one or a real OpenCode server)."""

from __future__ import annotations

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


async def notices_in(backend: SessionBackend, session_id: str) -> list[str]:
    """The notice texts a parent session received, oldest first."""
    out: list[str] = []
    for message in await backend.messages(session_id):
        out.extend(t for t in texts(message) if t.startswith(NOTICE_PREFIX))
    return out
