"""The task API the dashboard reads (``/v1/tasks``, ``/v1/stats``, ``/v1/events``) and the page.

Every ``/v1`` route here needs the service's bearer token in ``Authorization``; the page at
``/`` and its files under ``/static`` are public (they hold no data and ask for the token).
Errors are JSON ``{"error": code, "detail": text}``: 400 names the bad query parameter, 401 a
missing or wrong token, 404 an unknown task, 409 a cancel of a task that has ended, 502 a
session server that failed, 503 a full event stream or a store that failed (its own message,
which may name its file or DSN, goes to the service's log only). A task in a path is named by its
full id on every route (the agent tools, not this API, take unique id prefixes).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import statistics
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from ..tasks import conversation
from ..tasks.backend import JSON
from ..tasks.errors import (
    BackendError,
    SessionNotFoundError,
    StoreError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskRequestError,
)
from ..tasks.manager import TaskManager
from ..tasks.models import Task, TaskStatus, TaskUsage
from .api_schema import OPENAPI
from .auth import token_matches
from .connections import abort_connection
from .event_stream import EventHub, Subscription, TooManySubscribersError, task_json

STATIC_DIR = Path(__file__).with_name("static")

#: the page may load only its own files and talk only to this service
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

SORTS = ("-created_at", "created_at", "-updated_at", "updated_at")
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
#: the longest text of one message part the messages route returns (the rest is cut)
MAX_PART_CHARS = 20_000
#: concurrent message reads for the stats' tool counts
STATS_CONCURRENCY = 8

log = logging.getLogger(__name__)

#: the detail of a 503 when the store failed (its own message goes to the service's log)
STORE_FAILED = "The task store failed; the service's log has the details. Try again shortly."

UNAUTHORIZED = (
    "Send the service token as `Authorization: Bearer <token>`; it is in the token file that "
    "`asyncagents serve` printed at start."
)


class ApiError(Exception):
    """An error answer: HTTP status, a short code and a sentence for a person."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(
            {"error": self.error, "detail": self.detail}, self.status, headers=headers
        )


def bad_param(name: str, detail: str) -> ApiError:
    """A 400 naming the query parameter."""
    return ApiError(400, "bad_request", f"query parameter {name!r}: {detail}")


# -- query parsing ----------------------------------------------------------------------------


def _only(request: Request, allowed: Sequence[str]) -> dict[str, str]:
    """The query parameters, each given at most once, none unknown."""
    params = request.query_params
    for key in params:
        if key not in allowed:
            raise bad_param(key, f"unknown; this route takes {', '.join(allowed) or 'none'}")
        if len(params.getlist(key)) > 1:
            raise bad_param(key, "given more than once")
    return {k: params[k] for k in params}


def _int_param(params: dict[str, str], name: str, default: int | None, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise bad_param(name, "required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_param(name, f"{raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise bad_param(name, f"{value} is out of range {lo}..{hi}")
    return value


def _bool_param(params: dict[str, str], name: str) -> bool:
    raw = params.get(name, "").strip().lower()
    if raw in ("", "false", "0", "no"):
        return False
    if raw in ("true", "1", "yes"):
        return True
    raise bad_param(name, f"{params[name]!r} is not a boolean (true or false)")


def _statuses(params: dict[str, str]) -> set[TaskStatus] | None:
    raw = params.get("status")
    if not raw:
        return None
    out: set[TaskStatus] = set()
    for item in raw.split(","):
        try:
            out.add(TaskStatus(item.strip()))
        except ValueError:
            known = ", ".join(s.value for s in TaskStatus)
            raise bad_param("status", f"{item.strip()!r} is not one of {known}") from None
    return out


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the sort, and the last task's sort key and id."""

    sort: str
    key: int
    id: str

    def encode(self) -> str:
        raw = json.dumps([self.sort, self.key, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, sort: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            s, key, task_id = json.loads(raw)
            if not (isinstance(s, str) and isinstance(key, int) and isinstance(task_id, str)):
                raise ValueError
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError):
            raise bad_param("cursor", "not a cursor this service returned") from None
        if s != sort:
            raise bad_param("cursor", f"made for sort={s}, not sort={sort}")
        return cls(s, key, task_id)


def _sort_key(task: Task, field: str) -> int:
    return task.updated_at if field == "updated_at" else task.created_at


def page_tasks(
    tasks: Sequence[Task], *, sort: str, limit: int, cursor: Cursor | None
) -> tuple[list[Task], Cursor | None]:
    """One page of `tasks` in `sort` order after `cursor` (keyset: stable under inserts)."""
    field = sort.lstrip("-")
    descending = sort.startswith("-")
    ordered = sorted(tasks, key=lambda t: (_sort_key(t, field), t.id), reverse=descending)
    if cursor is not None:
        mark = (cursor.key, cursor.id)

        def after(t: Task) -> bool:
            key = (_sort_key(t, field), t.id)
            return key < mark if descending else key > mark

        ordered = [t for t in ordered if after(t)]
    page = ordered[:limit]
    more = len(ordered) > limit
    last = page[-1] if page else None
    next_cursor = Cursor(sort, _sort_key(last, field), last.id) if more and last else None
    return page, next_cursor


def matches_text(task: Task, needle: str) -> bool:
    """`q`: a case-insensitive substring of the description or the prompt."""
    folded = needle.casefold()
    return folded in task.description.casefold() or folded in task.prompt.casefold()


# -- task views -------------------------------------------------------------------------------


def turn_duration_ms(task: Task) -> int | None:
    """How long the task's last turn ran (launch: since creation; resume: since its start)."""
    if task.completed_at is None or task.status.active:
        return None
    start = task.created_at
    if task.resume_count > 0 and task.turn_started_at is not None:
        start = task.turn_started_at
    return max(0, task.completed_at - start)


def _clip(text: Any) -> tuple[str, bool]:
    value = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    if len(value) <= MAX_PART_CHARS:
        return value, False
    return value[:MAX_PART_CHARS], True


def message_view(message: JSON) -> JSON:
    """One OpenCode message as the page shows it: role, time, and its readable parts."""
    info = message.get("info") or {}
    parts: list[JSON] = []
    for part in message.get("parts") or []:
        kind = part.get("type")
        if kind in ("text", "reasoning"):
            text, cut = _clip(part.get("text", ""))
            parts.append({"type": kind, "text": text, "truncated": cut})
        elif kind == "tool":
            state = part.get("state") or {}
            output, cut = _clip(state.get("output") or state.get("error") or "")
            parts.append(
                {
                    "type": "tool",
                    "tool": part.get("tool"),
                    "status": state.get("status"),
                    "input": state.get("input"),
                    "output": output,
                    "truncated": cut,
                }
            )
        elif isinstance(kind, str):
            # files, patches, subtasks...: the output tool's one-line text; bookkeeping: none
            lines = conversation.format_part(part)
            if lines:
                parts.append({"type": kind, "text": "\n".join(lines), "truncated": False})
    error = info.get("error")
    return {
        "id": info.get("id"),
        "role": info.get("role"),
        "agent": info.get("agent") or info.get("mode"),
        "created_at": (info.get("time") or {}).get("created"),
        "error": (error.get("data") or {}).get("message") or error.get("name")
        if isinstance(error, dict)
        else None,
        "parts": parts,
    }


def select_messages(
    messages: list[JSON],
    task: Task,
    *,
    full_session: bool,
    since_message_id: str | None,
    message_limit: int | None,
) -> list[JSON]:
    """The output tool's filters: the current turn (or the whole session), after a message id,
    the newest `message_limit`."""
    if not full_session and task.turn_after_message_id is not None:
        ids = [str((m.get("info") or {}).get("id")) for m in messages]
        if task.turn_after_message_id in ids:
            messages = messages[ids.index(task.turn_after_message_id) + 1 :]
    try:
        return conversation.select_messages(
            messages, since_message_id=since_message_id, message_limit=message_limit
        )
    except TaskRequestError:
        raise bad_param(
            "since_message_id", f"{since_message_id!r} is not in the conversation"
        ) from None


def percentile(sorted_values: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def duration_summary(durations: Sequence[int]) -> JSON:
    """min, median, p95, max (ms) of ended turns; nulls when none ended."""
    values = sorted(durations)
    if not values:
        return {"count": 0, "min_ms": None, "median_ms": None, "p95_ms": None, "max_ms": None}
    return {
        "count": len(values),
        "min_ms": values[0],
        "median_ms": statistics.median(values),
        "p95_ms": percentile(values, 0.95),
        "max_ms": values[-1],
    }


def usage_sums(tasks: Sequence[Task]) -> JSON:
    """Tokens and cost of `tasks`: in all, and by agent, model, parent session and tree."""
    total = TaskUsage()
    groups: dict[str, dict[str, TaskUsage]] = {
        "by_agent": {},
        "by_model": {},
        "by_parent": {},
        "by_tree": {},
    }

    def add(group: str, key: str, usage: TaskUsage) -> None:
        sums = groups[group]
        sums[key] = sums.get(key, TaskUsage()) + usage

    for task in tasks:
        total = total + task.usage
        add("by_agent", task.agent, task.usage)
        add("by_parent", task.parent_session_id, task.usage)
        add("by_tree", task.tree_id, task.usage)
        for model, usage in task.usage_by_model.items():
            add("by_model", model, usage)
    out: JSON = {"total": total.model_dump(mode="json")}
    for group, sums in groups.items():
        out[group] = {k: sums[k].model_dump(mode="json") for k in sorted(sums)}
    return out


def count_tools(messages: list[JSON]) -> Counter[str]:
    """Tool calls by name in a conversation."""
    counts: Counter[str] = Counter()
    for message in messages:
        for part in message.get("parts") or []:
            if part.get("type") == "tool":
                counts[str(part.get("tool") or "unknown")] += 1
    return counts


class EventStreamResponse(StreamingResponse):
    """The SSE response of one subscription; its slot is freed however the response ends
    (also when the client leaves before the first byte, when the stream never starts).

    When the hub drops the subscriber (too slow), the response stops where it is, even in the
    middle of a write the client does not read, and its connection is reset (`connections`):
    the slot is freed once the connection is gone.
    """

    def __init__(self, hub: EventHub, sub: Subscription, body: AsyncIterator[bytes]) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._hub = hub
        self._sub = sub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        serving = asyncio.ensure_future(super().__call__(scope, receive, send))
        dropped = asyncio.ensure_future(self._sub.dropped.wait())
        try:
            await asyncio.wait({serving, dropped}, return_when=asyncio.FIRST_COMPLETED)
            if serving.done():
                serving.result()
            if self._sub.dropped.is_set():
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
                await abort_connection(scope)
        finally:
            dropped.cancel()
            serving.cancel()
            self._hub.unsubscribe(self._sub)


# -- the routes -------------------------------------------------------------------------------

Endpoint = Callable[[Request], Awaitable[Response]]


class DashboardApi:
    """The task API, the event stream and the page, over one `TaskManager`.

    `routes` go into the service's Starlette app; `close()` ends the open event streams (call
    it when the service stops, before the server waits for connections to finish).
    """

    #: what the page needs without a token (it holds no data and asks for the token)
    public_paths: tuple[str, ...] = ("/",)
    public_prefixes: tuple[str, ...] = ("/static/",)

    def __init__(
        self,
        manager: TaskManager,
        *,
        token: str,
        hub: EventHub | None = None,
        closing: asyncio.Event | None = None,
        poll_interval: float | None = 1.0,
    ) -> None:
        if not token:
            raise ValueError("token is required")
        self.manager = manager
        self.token = token
        self.hub = hub or EventHub()
        #: set when the service stops: the event streams end, new ones get 503
        self.closing = closing or asyncio.Event()
        #: how often the store is compared with what the hub published (None: never); it
        #: catches changes no listener reports (other processes sharing the store)
        self.poll_interval = poll_interval
        self._poller: asyncio.Task[None] | None = None
        self.hub.attach(manager)
        #: (task id, turn, updated_at) -> tool counts of an ended turn (they no longer change)
        self._tool_counts: dict[tuple[str, int, int], Counter[str]] = {}
        self.routes: list[BaseRoute] = [
            Route("/", self.page, methods=["GET"], include_in_schema=False),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static"),
            Route("/v1/tasks", self._api(self.list_tasks), methods=["GET"]),
            Route("/v1/tasks/{task_id}", self._api(self.get_task), methods=["GET"]),
            Route("/v1/tasks/{task_id}/messages", self._api(self.messages), methods=["GET"]),
            Route("/v1/tasks/{task_id}/cancel", self._api(self.cancel), methods=["POST"]),
            Route("/v1/stats", self._api(self.stats), methods=["GET"]),
            Route("/v1/events", self._api(self.events), methods=["GET"]),
            Route("/v1/openapi.json", self._api(self.openapi), methods=["GET"]),
        ]

    def close(self) -> None:
        """Stop listening to the manager and end every event stream (and the store poll)."""
        self.closing.set()
        self.hub.detach()
        if self._poller is not None:
            self._poller.cancel()

    # -- plumbing ------------------------------------------------------------------------------

    def _api(self, endpoint: Endpoint) -> Endpoint:
        """Check the token, turn `ApiError` into its JSON answer."""

        async def guarded(request: Request) -> Response:
            try:
                self._authorize(request)
                return await endpoint(request)
            except ApiError as exc:
                return exc.response()
            except StoreError:
                # the store's message may name its file or DSN: for the log, not the client
                log.exception("%s %s: the task store failed", request.method, request.url.path)
                return ApiError(503, "store_unavailable", STORE_FAILED).response()

        guarded.__name__ = endpoint.__name__
        guarded.__doc__ = endpoint.__doc__
        return guarded

    def _authorize(self, request: Request) -> None:
        # the service's middleware checks first; this keeps the routes safe wherever mounted
        if not token_matches(request.headers.get("authorization"), self.token):
            raise ApiError(401, "unauthorized", UNAUTHORIZED)

    async def _all_tasks(self) -> list[Task]:
        return await self.manager.store.list_tasks(backend=self.manager.backend_name)

    async def _task(self, request: Request) -> Task:
        """The task the path names, by its full id (every route: no prefixes, so a call never
        acts on another task than the one it names); 404 if it is not one of this backend's."""
        task_id = request.path_params["task_id"]
        task = await self.manager.store.get(task_id)
        if task is None or task.backend != self.manager.backend_name:
            raise ApiError(404, "not_found", f"no task {task_id!r}")
        return task

    # -- endpoints -----------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        """The dashboard page."""
        return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    async def list_tasks(self, request: Request) -> Response:
        """Tasks matching the filters, one page of them, newest first by default."""
        params = _only(request, ("parent", "status", "agent", "q", "sort", "limit", "cursor"))
        sort = params.get("sort") or SORTS[0]
        if sort not in SORTS:
            raise bad_param("sort", f"{sort!r} is not one of {', '.join(SORTS)}")
        limit = _int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        cursor = Cursor.decode(params["cursor"], sort) if params.get("cursor") else None
        statuses = _statuses(params)
        parent = params.get("parent") or None
        agent = params.get("agent") or None
        needle = params.get("q") or None
        tasks = [
            t
            for t in await self._all_tasks()
            if (parent is None or t.parent_session_id == parent)
            and (statuses is None or t.status in statuses)
            and (agent is None or t.agent == agent)
            and (needle is None or matches_text(t, needle))
        ]
        page, next_cursor = page_tasks(tasks, sort=sort, limit=limit, cursor=cursor)
        live = [self.hub.with_live_progress(t) for t in tasks]
        total = TaskUsage()
        for task in live:
            total = total + task.usage
        return JSONResponse(
            {
                "tasks": [task_json(self.hub.with_live_progress(t)) for t in page],
                "total": len(tasks),
                "usage": total.model_dump(mode="json"),
                "next_cursor": next_cursor.encode() if next_cursor else None,
            }
        )

    async def get_task(self, request: Request) -> Response:
        """One task with its progress and fork stats."""
        _only(request, ())
        task = self.hub.with_live_progress(await self._task(request))
        out = task_json(task)
        out["duration_ms"] = turn_duration_ms(task)
        # the page names a parent by its title (null: unknown now, the page shows the id)
        out["parent_title"] = await self.manager.session_title(task.parent_session_id)
        return JSONResponse(out)

    async def messages(self, request: Request) -> Response:
        """The child's conversation, filtered like the output tool's."""
        params = _only(request, ("full_session", "since_message_id", "message_limit"))
        full_session = _bool_param(params, "full_session")
        since = params.get("since_message_id") or None
        limit = (
            _int_param(params, "message_limit", None, 0, 10_000)
            if params.get("message_limit")
            else None
        )
        task = await self._task(request)
        messages: list[JSON] = []
        if task.session_id is not None:
            try:
                messages = await self.manager.backend.messages(task.session_id)
            except SessionNotFoundError:
                raise ApiError(
                    404,
                    "not_found",
                    f"the child session {task.session_id} of task {task.id} no longer exists",
                ) from None
            except BackendError as exc:
                raise ApiError(502, "backend_error", f"reading the conversation: {exc}") from exc
        chosen = select_messages(
            messages,
            task,
            full_session=full_session,
            since_message_id=since,
            message_limit=limit,
        )
        return JSONResponse(
            {
                "task_id": task.id,
                "session_id": task.session_id,
                "messages": [message_view(m) for m in chosen],
            }
        )

    async def cancel(self, request: Request) -> Response:
        """Cancel a running (or resumed) task."""
        _only(request, ())
        task_id = (await self._task(request)).id
        try:
            task = await self.manager.cancel(task_id)
        except TaskNotFoundError:
            raise ApiError(404, "not_found", f"no task {task_id!r}") from None
        except TaskNotRunningError as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        except TaskRequestError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        return JSONResponse(task_json(task))

    async def stats(self, request: Request) -> Response:
        """Counts by status and agent, tool calls by name, turn durations."""
        params = _only(request, ("parent",))
        parent = params.get("parent") or None
        tasks = [
            self.hub.with_live_progress(t)
            for t in await self._all_tasks()
            if parent is None or t.parent_session_id == parent
        ]
        by_status = Counter(t.status.value for t in tasks)
        by_agent = Counter(t.agent for t in tasks)
        tools, unreadable = await self._tool_totals(tasks)
        durations = [d for d in map(turn_duration_ms, tasks) if d is not None]
        return JSONResponse(
            {
                "tasks": len(tasks),
                "by_status": {s.value: by_status.get(s.value, 0) for s in TaskStatus},
                "by_agent": dict(sorted(by_agent.items())),
                "tool_calls": {
                    "total": sum(tools.values()),
                    "by_name": dict(sorted(tools.items(), key=lambda kv: (-kv[1], kv[0]))),
                    "unreadable_tasks": unreadable,
                },
                "durations": duration_summary(durations),
                "usage": usage_sums(tasks),
            }
        )

    async def _tool_totals(self, tasks: Sequence[Task]) -> tuple[Counter[str], int]:
        """Tool calls by name over the tasks' conversations (ended turns are cached)."""
        gate = asyncio.Semaphore(STATS_CONCURRENCY)

        async def one(task: Task) -> Counter[str] | None:
            key = (task.id, task.turn, task.updated_at)
            cached = self._tool_counts.get(key)
            if cached is not None:
                return cached
            assert task.session_id is not None
            async with gate:
                try:
                    messages = await self.manager.backend.messages(task.session_id)
                except BackendError:
                    return None
            counts = count_tools(messages)
            if not task.status.active:
                self._tool_counts[key] = counts
            return counts

        results = await asyncio.gather(*(one(t) for t in tasks if t.session_id))
        total: Counter[str] = Counter()
        unreadable = 0
        for counts in results:
            if counts is None:
                unreadable += 1
            else:
                total.update(counts)
        return total, unreadable

    async def events(self, request: Request) -> Response:
        """Server-Sent Events: a snapshot (or a resume), then every task change."""
        _only(request, ())
        if self.closing.is_set():
            raise ApiError(503, "unavailable", "the service is stopping")
        if self._poller is None and self.poll_interval is not None:
            # set before any await: streams opened at once start one poll, not one each
            self._poller = asyncio.get_running_loop().create_task(self._poll(self.poll_interval))
        try:
            sub = self.hub.subscribe(request.headers.get("last-event-id"))
        except TooManySubscribersError as exc:
            raise ApiError(503, "too_many_subscribers", str(exc)) from None
        return EventStreamResponse(
            self.hub, sub, self.hub.stream(sub, self._all_tasks, self.closing)
        )

    async def _reconcile(self, *, seed: bool = False) -> None:
        try:
            read_from = self.hub.last_id  # events published during the read are newer than it
            self.hub.reconcile(await self._all_tasks(), seed=seed, read_from=read_from)
        except Exception:  # a store that failed once may answer next time
            log.exception("comparing the stored tasks with the event stream failed")

    async def _poll(self, interval: float) -> None:
        """Compare the store with the events every `interval` s until the service stops; the
        first read only remembers the tasks (the snapshots show them)."""
        await self._reconcile(seed=True)
        while not self.closing.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), interval)
            if not self.closing.is_set():
                await self._reconcile()

    async def openapi(self, request: Request) -> Response:
        """This API's OpenAPI document."""
        _only(request, ())
        return JSONResponse(OPENAPI)
