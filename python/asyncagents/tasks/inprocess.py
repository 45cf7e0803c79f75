"""`InProcessBackend`: OpenCode-shaped sessions in memory, replies from a function you supply.

It lets a server embed the task manager without an OpenCode process, and lets tests drive every
path (tool steps, provider errors, aborts, deleted sessions, lost events, failing deliveries)
deterministically. Messages, parts, events and errors have the shapes of OpenCode 1.18.33.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from .backend import JSON, PromptRequest, part_id_of
from .errors import BackendUnavailableError, SessionNotFoundError
from .models import now_ms

_seq = itertools.count(1)
_clock = {"ms": 0, "counter": 0}
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _id(prefix: str) -> str:
    """Ascending ids as OpenCode makes them: 12 hex digits of ``(ms * 0x1000 + counter) mod
    2**48`` (the counter restarts each millisecond), then 14 random base62 characters."""
    ms = now_ms()
    if ms != _clock["ms"]:
        _clock["ms"], _clock["counter"] = ms, 0
    _clock["counter"] += 1
    stamp = (ms * 0x1000 + _clock["counter"]) % (1 << 48)
    tail = "".join(_BASE62[b % 62] for b in os.urandom(14))
    return f"{prefix}_{stamp:012x}{tail}"


class ProviderError(Exception):
    """Raise from a responder to end the turn as a provider error (``APIError``)."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


class InProcessTurn:
    """What a responder sees: the prompt, the history, and a way to record tool steps."""

    def __init__(self, backend: InProcessBackend, session_id: str, user: JSON) -> None:
        self._backend = backend
        self.session_id = session_id
        self.user_message = user
        self.prompt: str = "".join(
            str(p.get("text", "")) for p in user["parts"] if p.get("type") == "text"
        )
        self.agent: str | None = user["info"].get("agent")
        self.tools: dict[str, bool] = dict(user["info"].get("tools") or {})
        self.history: list[JSON] = json.loads(json.dumps(backend._messages[session_id]))

    async def tool(self, name: str, tool_input: JSON, output: str) -> None:
        """Record one completed tool step (an assistant message with ``finish: tool-calls``)."""
        self._backend._add_assistant(
            self.session_id,
            self.user_message["info"]["id"],
            parts=[
                {
                    "type": "tool",
                    "callID": _id("call"),
                    "tool": name,
                    "state": {
                        "status": "completed",
                        "input": tool_input,
                        "output": output,
                        "title": name,
                        "metadata": {},
                        "time": {"start": now_ms(), "end": now_ms()},
                    },
                }
            ],
            finish="tool-calls",
        )
        await asyncio.sleep(0)


Responder = Callable[[InProcessTurn], Awaitable[str]]

#: the one model the in-process backend offers by default (replies come from the responder)
DEFAULT_PROVIDERS: JSON = {
    "providers": [
        {
            "id": "inprocess",
            "name": "In-process",
            "models": {
                "inprocess": {"id": "inprocess", "limit": {"context": 200_000, "output": 8_192}}
            },
        }
    ],
    "default": {"inprocess": "inprocess"},
}


class InProcessBackend:
    """A `SessionBackend` held in memory; `responder` produces each reply.

    Test knobs: `drop_events` (events are not published: proves reconciliation), `disconnect()`
    (ends every open event stream: proves reconnects), `fail_prompts` (session ids whose prompts
    fail as if the server were down: proves notice retries), `down` (every call fails).
    `prompts` records every prompt body sent, until its session is deleted. `step_usage`
    (``{"tokens": {input, output, reasoning, cache: {read, write}}, "cost": USD}``) is what
    every assistant message records, as a model's usage report would make OpenCode record it.

    Its `name` (the manager's default backend name) is ``inprocess:<random id>``, unique to
    this object: its sessions live in this object only, so no other backend, process or run of
    the application can follow them. Two applications on one store never take each other's
    tasks for their own; a new backend object does not adopt the tasks of an old one (their
    sessions are gone with it).
    """

    #: its sessions live in this object only: a manager deletes the child sessions of cleared
    #: tasks by default (nobody else could open them), which it leaves on a real server
    sessions_private = True

    def __init__(self, responder: Responder, *, event_queue_size: int = 100_000) -> None:
        self.name = f"inprocess:{os.urandom(8).hex()}"
        self.responder = responder
        self._sessions: dict[str, JSON] = {}
        self._messages: dict[str, list[JSON]] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._subscribers: set[asyncio.Queue[JSON | None]] = set()
        self._queue_size = event_queue_size
        self.drop_events = False
        self.down = False
        self.fail_prompts: set[str] = set()
        self.prompts: list[tuple[str, JSON]] = []
        self.step_usage: JSON | None = None
        #: what ``GET /config/providers`` answers, and the server's default model
        self.providers_body: JSON = json.loads(json.dumps(DEFAULT_PROVIDERS))
        self.default_model: str | None = "inprocess/inprocess"

    def session_ids(self) -> list[str]:
        """The ids of every session it holds (deleted ones are gone with all they had)."""
        return list(self._sessions)

    # -- helpers ------------------------------------------------------------------------------

    def _guard(self) -> None:
        if self.down:
            raise BackendUnavailableError("in-process backend is down (test knob)")

    def _session(self, session_id: str) -> JSON:
        self._guard()
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    def publish(self, kind: str, properties: JSON) -> None:
        """Send one event to every open stream (unless `drop_events`)."""
        if self.drop_events:
            return
        event = {"id": _id("evt"), "type": kind, "properties": properties}
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    def disconnect(self) -> None:
        """End every open event stream, as a dropped connection would."""
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)

    def seed_messages(self, session_id: str, messages: list[JSON]) -> None:
        """Append messages as they are (OpenCode's ``{info, parts}``): an imported history."""
        self._session(session_id)
        self._messages[session_id].extend(json.loads(json.dumps(messages)))

    def add_message(self, session_id: str, role: str, text: str) -> JSON:
        """Append a finished message (to build parent histories for forks and benches)."""
        self._session(session_id)
        info: JSON = {"id": _id("msg"), "sessionID": session_id, "role": role}
        if role == "assistant":
            info.update(time={"created": now_ms(), "completed": now_ms()}, finish="stop")
        else:
            info.update(time={"created": now_ms()}, agent="build")
        message = {"info": info, "parts": [self._part(info["id"], session_id, "text", text=text)]}
        self._messages[session_id].append(message)
        return message

    def _part(self, message_id: str, session_id: str, kind: str, **fields: Any) -> JSON:
        return {
            "id": _id("prt"),
            "sessionID": session_id,
            "messageID": message_id,
            "type": kind,
            **fields,
        }

    def _add_assistant(
        self,
        session_id: str,
        parent_id: str,
        *,
        parts: list[JSON],
        finish: str | None,
        error: JSON | None = None,
    ) -> JSON:
        info: JSON = {
            "id": _id("msg"),
            "sessionID": session_id,
            "role": "assistant",
            "parentID": parent_id,
            "time": {"created": now_ms(), "completed": now_ms()},
            "modelID": "inprocess",
            "providerID": "inprocess",
            "mode": "build",
        }
        if self.step_usage is not None:
            info.update(json.loads(json.dumps(self.step_usage)))
        if finish:
            info["finish"] = finish
        if error:
            info["error"] = error
        full_parts = [self._part(info["id"], session_id, p.pop("type"), **p) for p in parts]
        message = {"info": info, "parts": full_parts}
        if session_id in self._messages:
            self._messages[session_id].append(message)
            self.publish("message.updated", {"sessionID": session_id, "info": info})
            for part in full_parts:
                self.publish("message.part.updated", {"sessionID": session_id, "part": part})
        return message

    # -- SessionBackend -----------------------------------------------------------------------

    async def create_session(
        self, *, parent_id: str | None = None, title: str | None = None
    ) -> JSON:
        self._guard()
        session: JSON = {
            "id": _id("ses"),
            "title": title or "New session",
            "version": "inprocess",
            "time": {"created": now_ms(), "updated": now_ms()},
        }
        if parent_id:
            session["parentID"] = parent_id
        self._sessions[session["id"]] = session
        self._messages[session["id"]] = []
        self.publish("session.created", {"sessionID": session["id"], "info": session})
        return dict(session)

    async def get_session(self, session_id: str) -> JSON:
        return dict(self._session(session_id))

    async def delete_session(self, session_id: str) -> None:
        session = self._session(session_id)
        for child in [s for s in self._sessions.values() if s.get("parentID") == session_id]:
            await self.delete_session(child["id"])
        running = self._running.pop(session_id, None)
        if running is not None:
            running.cancel()
        del self._sessions[session_id]
        del self._messages[session_id]
        # nothing of a deleted session stays behind (memory returns to its baseline)
        if any(sid == session_id for sid, _ in self.prompts):
            self.prompts = [(sid, body) for sid, body in self.prompts if sid != session_id]
        self.publish("session.deleted", {"sessionID": session_id, "info": session})

    async def messages(self, session_id: str, *, limit: int | None = None) -> list[JSON]:
        await asyncio.sleep(0)  # a read yields to the loop, as a request to a server would
        self._session(session_id)
        items = self._messages[session_id]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        out: list[JSON] = json.loads(json.dumps(items))
        return out

    async def messages_raw(self, session_id: str) -> bytes:
        await asyncio.sleep(0)
        self._session(session_id)
        return json.dumps(self._messages[session_id]).encode()

    def _stored(self, session_id: str, message_id: str | None) -> JSON | None:
        """The message with this id, if the session has it."""
        if message_id is None:
            return None
        for message in self._messages[session_id]:
            if message["info"]["id"] == message_id:
                return message
        return None

    def _answered(self, session_id: str, user: JSON) -> bool:
        """A run is going on, or an assistant message came after `user` (OpenCode's loop ends
        at once then: a prompt re-sent with the same id is not answered twice)."""
        running = self._running.get(session_id)
        if running is not None and not running.done():
            return True
        return any(
            m["info"].get("role") == "assistant" and m["info"]["id"] > user["info"]["id"]
            for m in self._messages[session_id]
        )

    def _add_user(self, session_id: str, request: PromptRequest) -> JSON:
        self._session(session_id)
        self.prompts.append((session_id, request.body()))
        if session_id in self.fail_prompts:
            raise BackendUnavailableError(f"prompt to {session_id} failed (test knob)")
        stored = self._stored(session_id, request.message_id)
        if stored is not None:
            return stored  # OpenCode stores a message id once
        info: JSON = {
            "id": request.message_id or _id("msg"),
            "sessionID": session_id,
            "role": "user",
            "time": {"created": now_ms()},
            "agent": request.agent or "build",
            "model": dict(request.model or {"providerID": "inprocess", "modelID": "inprocess"}),
        }
        if request.tools:
            info["tools"] = dict(request.tools)
        part = self._part(info["id"], session_id, "text", text=request.text)
        if request.message_id:
            part["id"] = part_id_of(request.message_id)
        message: JSON = {"info": info, "parts": [part]}
        self._messages[session_id].append(message)
        self.publish("message.updated", {"sessionID": session_id, "info": info})
        return message

    async def prompt(self, session_id: str, request: PromptRequest) -> JSON:
        user = self._add_user(session_id, request)
        if request.no_reply:
            out: JSON = json.loads(json.dumps(user))
            return out
        await self._run(session_id, user)
        return (
            json.loads(json.dumps(self._messages[session_id][-1]))
            if session_id in self._messages
            else {}
        )

    async def prompt_async(self, session_id: str, request: PromptRequest) -> None:
        user = self._add_user(session_id, request)
        if request.no_reply or self._answered(session_id, user):
            return
        previous = self._running.get(session_id)
        if previous is not None and not previous.done():
            return  # OpenCode's loop picks the queued message up; keep it simple here
        task = asyncio.get_running_loop().create_task(self._run(session_id, user))
        self._running[session_id] = task

    async def _run(self, session_id: str, user: JSON) -> None:
        """One turn: busy, responder, final assistant message (or error), idle."""
        await asyncio.sleep(0)  # like OpenCode: the session turns busy after prompt_async returns
        busy = {"sessionID": session_id, "status": {"type": "busy"}}
        self.publish("session.status", busy)
        parent_id = user["info"]["id"]
        error: JSON | None = None
        try:
            text = await self.responder(InProcessTurn(self, session_id, user))
            self._add_assistant(
                session_id, parent_id, parts=[{"type": "text", "text": text}], finish="stop"
            )
        except asyncio.CancelledError:
            error = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}
            self._add_assistant(session_id, parent_id, parts=[], finish=None, error=error)
        except ProviderError as exc:
            error = {
                "name": "APIError",
                "data": {"message": str(exc), "statusCode": exc.status_code, "isRetryable": False},
            }
            self._add_assistant(session_id, parent_id, parts=[], finish=None, error=error)
        except Exception as exc:
            error = {"name": "UnknownError", "data": {"message": f"{type(exc).__name__}: {exc}"}}
            self._add_assistant(session_id, parent_id, parts=[], finish=None, error=error)
        finally:
            if self._running.get(session_id) is asyncio.current_task():
                del self._running[session_id]
        if error is not None:
            self.publish("session.error", {"sessionID": session_id, "error": error})
        self.publish("session.status", {"sessionID": session_id, "status": {"type": "idle"}})
        self.publish("session.idle", {"sessionID": session_id})

    async def abort(self, session_id: str) -> bool:
        self._guard()
        running = self._running.pop(session_id, None)
        if running is not None and not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        return True

    async def status(self) -> Mapping[str, JSON]:
        self._guard()
        return {sid: {"type": "busy"} for sid, t in self._running.items() if not t.done()}

    async def providers(self) -> JSON:
        self._guard()
        out: JSON = json.loads(json.dumps(self.providers_body))
        return out

    async def server_config(self) -> JSON:
        self._guard()
        return {"model": self.default_model} if self.default_model else {}

    async def events(self) -> AsyncIterator[JSON]:
        self._guard()
        queue: asyncio.Queue[JSON | None] = asyncio.Queue(self._queue_size)
        self._subscribers.add(queue)
        try:
            yield {"id": _id("evt"), "type": "server.connected", "properties": {}}
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event
        finally:
            self._subscribers.discard(queue)

    async def aclose(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        self._running.clear()
        self.disconnect()
