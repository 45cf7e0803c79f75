"""The one interface the manager needs from a session server (OpenCode's HTTP API shape)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, Field

JSON = dict[str, Any]


def part_id_of(message_id: str) -> str:
    """The id of the text part of a prompt whose message id we chose (``msg_x`` -> ``prt_x``)."""
    return "prt" + message_id.removeprefix("msg")


class PromptRequest(BaseModel):
    """The body of ``POST /session/{id}/message`` and ``/prompt_async``."""

    text: str
    agent: str | None = None
    no_reply: bool = False
    #: tool name -> enabled; children get the task tools switched off
    tools: dict[str, bool] = Field(default_factory=dict)
    #: ``{"providerID": ..., "modelID": ...}``; None lets the server pick its default
    model: dict[str, str] | None = None
    system: str | None = None
    #: the user message's id (``messageID``): the same id sent twice is one message
    message_id: str | None = None

    def body(self) -> JSON:
        """The JSON body OpenCode expects."""
        part: JSON = {"type": "text", "text": self.text}
        if self.message_id:
            # the part's id follows from the message's, so a re-sent prompt keeps one part
            part["id"] = part_id_of(self.message_id)
        body: JSON = {"parts": [part]}
        if self.agent:
            body["agent"] = self.agent
        if self.no_reply:
            body["noReply"] = True
        if self.tools:
            body["tools"] = dict(self.tools)
        if self.model:
            body["model"] = dict(self.model)
        if self.system:
            body["system"] = self.system
        if self.message_id:
            body["messageID"] = self.message_id
        return body


class SessionBackend(Protocol):
    """Sessions, messages, prompts and the event stream, as OpenCode serves them.

    Errors: `SessionNotFoundError` only when the server itself says the session does not exist
    (for OpenCode: its ``NotFoundError`` answer, confirmed by a second read), so a caller may
    drop what belongs to that session; `BackendUnavailableError` (`BackendTimeoutError`) when
    the server cannot be reached in time; any other `BackendError` (`BackendHTTPError`,
    `BackendProtocolError`, ...) for a failure that says nothing about the session, after
    which the caller keeps its state and retries later. Every call is bounded in time and size.

    A backend may declare a ``name``: the manager's default backend name (see
    `default_backend_name`), equal only among backends that see the same sessions.
    """

    async def create_session(
        self, *, parent_id: str | None = None, title: str | None = None
    ) -> JSON:
        """``POST /session``: a new session (a child when `parent_id` is given)."""

    async def get_session(self, session_id: str) -> JSON:
        """``GET /session/{id}``."""

    async def delete_session(self, session_id: str) -> None:
        """``DELETE /session/{id}``."""

    async def messages(self, session_id: str, *, limit: int | None = None) -> list[JSON]:
        """``GET /session/{id}/message``, oldest first (the newest `limit` when given)."""

    async def messages_raw(self, session_id: str) -> bytes:
        """The same list as raw JSON bytes, for the fork pipeline (no Python objects)."""

    async def prompt(self, session_id: str, request: PromptRequest) -> JSON:
        """``POST /session/{id}/message``; with ``no_reply`` it returns the stored user message."""

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        """``POST /session/{id}/prompt_async``: accepted, the run goes on in the server."""

    async def abort(self, session_id: str) -> bool:
        """``POST /session/{id}/abort``."""

    async def status(self) -> Mapping[str, JSON]:
        """``GET /session/status``: busy/retry sessions only (idle ones are absent)."""

    async def providers(self) -> JSON:
        """``GET /config/providers``: ``{"providers": [...], "default": {...}}``."""

    async def server_config(self) -> JSON:
        """``GET /config``: the server's config (its default ``model`` among it)."""

    def events(self) -> AsyncIterator[JSON]:
        """One connection to ``GET /event``; it ends or raises when the stream drops."""

    async def aclose(self) -> None:
        """Release connections."""
