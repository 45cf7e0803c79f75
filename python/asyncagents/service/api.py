"""The task API the dashboard reads (``/v1/tasks``, ``/v1/stats``, ``/v1/events``) and the page.

Every ``/v1`` route here needs the service's bearer token in ``Authorization``; the page at
``/`` and its files under ``/static`` are public (they hold no data and ask for the token).
Errors are JSON ``{"error": code, "detail": text}``: 400 names the bad query parameter, 401 a
missing or wrong token, 404 an unknown task, 409 a cancel of a task that has ended, 502 a
session server that failed, 503 a full event stream or a store that failed (its own message,
which may name its file or DSN, goes to the service's log only). A task in a path is named by its
full id on every route (the agent tools, not this API, take unique id prefixes).

Each route is declared once (`Operation`): its query model parses the parameters, its answer
model is what it returns, and the OpenAPI document (``/v1/openapi.json``) is generated from these
declarations. The routes read and act only through `TaskManager`'s public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from ..tasks import conversation, queries
from ..tasks.backend import JSON
from ..tasks.errors import (
    BackendError,
    SessionNotFoundError,
    StoreError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskRequestError,
    UnknownMessageError,
)
from ..tasks.manager import TaskManager
from ..tasks.models import Task as StoredTask
from ..tasks.models import TaskUsage
from .auth import UNAUTHORIZED, require_token
from .connections import abort_connection
from .errors import ApiError, bad_param
from .event_stream import EventHub, Subscription, TooManySubscribersError
from .models import (
    Conversation,
    Cursor,
    MessagesQuery,
    MessageView,
    NoQuery,
    Query,
    Stats,
    StatsQuery,
    Task,
    TaskDetail,
    TaskListQuery,
    TaskPage,
    ToolCalls,
)
from .openapi import Operation, openapi_document

__all__ = ["UNAUTHORIZED", "ApiError", "DashboardApi", "duration_summary"]

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

#: the longest text of one message part the messages route returns (the rest is cut)
MAX_PART_CHARS = 20_000
#: the most tasks a new event stream's snapshot reads (the most recently changed ones); the
#: list route pages through all of them
SNAPSHOT_LIMIT = 500
#: how far back each store poll reaches before the previous one began (ms): writers on other
#: hosts stamp `updated_at` with their own clocks, and a write commits a little after its stamp
POLL_OVERLAP_MS = 5_000

log = logging.getLogger(__name__)

# AnyIO imports its file support on first use: here, with the service, rather than inside the
# first page served (an import in a server thread, racing with the imports of other threads)
_OPEN_FILE = anyio.open_file

#: the detail of a 503 when the store failed (its own message goes to the service's log)
STORE_FAILED = "The task store failed; the service's log has the details. Try again shortly."

TITLE = "asyncagents task API"
DESCRIPTION = (
    "Background tasks of the asyncagents service, their live events and statistics. Every "
    "route needs `Authorization: Bearer <token>` (the service's token file)."
)
EVENTS_DESCRIPTION = (
    "Each event has an increasing integer `id`; its `data` is the task's JSON, at most 64 KiB "
    "per event, its texts cut as needed and the cut fields named in `truncated` (the snapshot: "
    "`{tasks, heartbeat_ms, now_ms, omitted}`, the most recently changed tasks that fit in "
    "4 MiB, each at most 16 KiB; `omitted` counts the others). Send `Last-Event-ID` to resume "
    "after a reconnect; a fresh snapshot comes when that id is too old or not an id. Comment "
    "lines are heartbeats. A client too slow to read is disconnected."
)


def answer(model: BaseModel, *, exclude_unset: bool = False) -> Response:
    """A model as the JSON answer."""
    return Response(
        model.__pydantic_serializer__.to_json(model, exclude_unset=exclude_unset),
        media_type="application/json",
    )


# -- views --------------------------------------------------------------------------------------


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


def add_usage(total: TaskUsage, plus: TaskUsage, minus: TaskUsage) -> TaskUsage:
    """`total` + `plus` - `minus`, field by field (a live usage in place of a stored one)."""
    values = {
        name: getattr(total, name) + getattr(plus, name) - getattr(minus, name)
        for name in TaskUsage.model_fields
    }
    return queries.summed_usage(**values)


def duration_summary(durations: list[int]) -> JSON:
    """min, median, p95, max (ms) of ended turns; nulls when none ended."""
    return queries.duration_summary(durations).model_dump()


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

Handler = Callable[[Request, Any], Awaitable[Response]]


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
        #: how often the store is read for changes no listener reports (other processes
        #: sharing the store); None: never
        self.poll_interval = poll_interval
        self._poller: asyncio.Task[None] | None = None
        #: where the next store poll starts reading changes (ms, this host's clock)
        self._poll_from = 0
        self.hub.attach(manager)
        self.operations: list[tuple[Operation, Handler]] = [
            (
                Operation(
                    "GET",
                    "/v1/tasks",
                    "List tasks (newest first by default), one page at a time.",
                    query=TaskListQuery,
                    answer=TaskPage,
                    answer_description="A page of tasks.",
                    errors={400: "", 503: "The task store failed."},
                ),
                self.list_tasks,
            ),
            (
                Operation(
                    "GET",
                    "/v1/tasks/{task_id}",
                    "One task, with its progress, fork stats and last turn's duration.",
                    answer=TaskDetail,
                    answer_description="The task.",
                    errors={400: "", 404: "", 503: "The task store failed."},
                ),
                self.get_task,
            ),
            (
                Operation(
                    "GET",
                    "/v1/tasks/{task_id}/messages",
                    "The child session's messages, chosen as the output tool chooses them.",
                    query=MessagesQuery,
                    answer=Conversation,
                    answer_description="The chosen messages, oldest first.",
                    errors={
                        400: "",
                        404: "No such task, or its child session no longer exists.",
                        502: "",
                        503: "The task store failed.",
                    },
                ),
                self.messages,
            ),
            (
                Operation(
                    "POST",
                    "/v1/tasks/{task_id}/cancel",
                    "Cancel a queued or running (or resumed) task.",
                    answer=Task,
                    answer_description="The cancelled task.",
                    errors={400: "", 404: "", 409: "", 503: "The task store failed."},
                ),
                self.cancel,
            ),
            (
                Operation(
                    "GET",
                    "/v1/stats",
                    "Counts by status and agent, tool calls by name, last-turn durations, "
                    "tokens and cost (of the top `top` parents and trees).",
                    query=StatsQuery,
                    answer=Stats,
                    answer_description="The counts.",
                    errors={400: "", 503: "The task store failed."},
                ),
                self.stats,
            ),
            (
                Operation(
                    "GET",
                    "/v1/events",
                    "Server-Sent Events: `snapshot`, then task.created, task.updated, "
                    "task.completed, task.error, task.cancelled, task.resumed, task.cleared.",
                    description=EVENTS_DESCRIPTION,
                    media_type="text/event-stream",
                    answer_schema={"type": "string"},
                    answer_description="The event stream.",
                    errors={400: "", 503: "Too many subscribers, or the service is stopping."},
                    headers=(("Last-Event-ID", "The last event id received (a resume)."),),
                ),
                self.events,
            ),
            (
                Operation(
                    "GET",
                    "/v1/openapi.json",
                    "This document.",
                    answer_description="The OpenAPI document.",
                    errors={400: ""},
                ),
                self.openapi,
            ),
        ]
        self.document = openapi_document(
            [op for op, _ in self.operations],
            title=TITLE,
            version="1",
            description=DESCRIPTION,
        )
        self.routes: list[BaseRoute] = [
            Route("/", self.page, methods=["GET"], include_in_schema=False),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static"),
            *(
                Route(op.path, self._endpoint(op, handler), methods=[op.method])
                for op, handler in self.operations
            ),
        ]

    def close(self) -> None:
        """Stop listening to the manager and end every event stream (and the store poll)."""
        self.closing.set()
        self.hub.detach()
        if self._poller is not None:
            self._poller.cancel()

    # -- plumbing ------------------------------------------------------------------------------

    def _endpoint(
        self, op: Operation, handler: Handler
    ) -> Callable[[Request], Awaitable[Response]]:
        """The route: the token (checked here too, so the routes stay guarded wherever they
        are mounted), the query as `op.query`, the handler; `ApiError` as its answer."""
        query_model: type[Query] = op.query

        async def endpoint(request: Request) -> Response:
            try:
                require_token(request.headers.get("authorization"), self.token)
                return await handler(request, query_model.parse(request))
            except ApiError as exc:
                return exc.response()
            except StoreError:
                # the store's message may name its file or DSN: for the log, not the client
                log.exception("%s %s: the task store failed", request.method, request.url.path)
                return ApiError(503, "store_unavailable", STORE_FAILED).response()

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        return endpoint

    async def _snapshot(self) -> list[StoredTask]:
        page = await self.manager.query_tasks(sort="updated_at", limit=SNAPSHOT_LIMIT, count=False)
        return page.tasks

    async def _task(self, request: Request) -> StoredTask:
        """The task the path names, by its full id (every route: no prefixes, so a call never
        acts on another task than the one it names); 404 if it is not one of this backend's."""
        task_id = request.path_params["task_id"]
        try:
            return await self.manager.get_task(task_id, prefix=False)
        except TaskNotFoundError:
            raise ApiError(404, "not_found", f"no task {task_id!r}") from None

    # -- endpoints -----------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        """The dashboard page."""
        return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    async def list_tasks(self, request: Request, query: TaskListQuery) -> Response:
        """Tasks matching the filters, one page of them, newest first by default."""
        page = await self.manager.query_tasks(
            parent_session_id=query.parent,
            statuses=query.statuses,
            agent=query.agent,
            text=query.q,
            sort=query.sort_field,
            descending=query.sort.startswith("-"),
            limit=query.limit,
            after=query.after,
        )
        last = page.next_after
        usage = page.usage or TaskUsage()
        for stored, live in await self._live_tasks():
            if queries.matches(
                stored,
                queries.TaskQuery(
                    backend=stored.backend,
                    parent_session_id=query.parent,
                    statuses=None if query.statuses is None else frozenset(query.statuses),
                    agent=query.agent,
                    text=query.q,
                ),
            ):
                usage = add_usage(usage, live.usage, stored.usage)
        return answer(
            TaskPage(
                tasks=[Task.of(self.hub.with_live_progress(t)) for t in page.tasks],
                total=page.total or 0,
                usage=queries.summed_usage(**usage.model_dump()),
                next_cursor=None
                if last is None
                else Cursor(sort=query.sort, key=last[0], id=last[1]).encode(),
            )
        )

    async def get_task(self, request: Request, query: NoQuery) -> Response:
        """One task with its progress and fork stats."""
        task = self.hub.with_live_progress(await self._task(request))
        return answer(
            TaskDetail.model_validate(
                {
                    **task.__dict__,
                    "duration_ms": queries.turn_duration_ms(task),
                    # the page names a parent by its title (null: unknown now; it shows the id)
                    "parent_title": await self.manager.session_title(task.parent_session_id),
                }
            )
        )

    async def messages(self, request: Request, query: MessagesQuery) -> Response:
        """The child's conversation, chosen as the output tool chooses it."""
        task = await self._task(request)
        try:
            read = await self.manager.read_messages(
                task.id,
                full_session=query.full_session,
                since_message_id=query.since_message_id,
                message_limit=query.message_limit,
            )
        except TaskNotFoundError:
            raise ApiError(404, "not_found", f"no task {task.id!r}") from None
        except UnknownMessageError:
            raise bad_param(
                "since_message_id", f"{query.since_message_id!r} is not in the conversation"
            ) from None
        except SessionNotFoundError:
            raise ApiError(
                404,
                "not_found",
                f"the child session {task.session_id} of task {task.id} no longer exists",
            ) from None
        except BackendError as exc:
            raise ApiError(502, "backend_error", f"reading the conversation: {exc}") from exc
        except TaskRequestError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        return answer(
            Conversation(
                task_id=read.task.id,
                session_id=read.task.session_id,
                messages=[MessageView.model_validate(message_view(m)) for m in read.messages],
            ),
            exclude_unset=True,
        )

    async def cancel(self, request: Request, query: NoQuery) -> Response:
        """Cancel a queued or running (or resumed) task."""
        task_id = (await self._task(request)).id
        try:
            task = await self.manager.cancel(task_id)
        except TaskNotFoundError:
            raise ApiError(404, "not_found", f"no task {task_id!r}") from None
        except TaskNotRunningError as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        except TaskRequestError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        return answer(Task.of(task))

    async def stats(self, request: Request, query: StatsQuery) -> Response:
        """Counts by status and agent, tool calls by name, turn durations."""
        stats = await self.manager.task_stats(query.parent, query.top)
        return answer(
            Stats(
                tasks=stats.tasks,
                by_status=stats.by_status,
                by_agent=stats.by_agent,
                tool_calls=ToolCalls(
                    total=sum(stats.tool_calls.values()),
                    by_name=stats.tool_calls,
                    unreadable_tasks=stats.tools_unrecorded,
                ),
                durations=stats.durations,
                usage=await self._live_sums(stats.usage, query.parent, query.top),
            )
        )

    async def _live_tasks(self) -> list[tuple[StoredTask, StoredTask]]:
        """The running tasks whose tokens and cost the hub knows newer than stored (their
        manager stores them at each check; the hub hears them as they come): stored, live."""
        out = []
        for task_id in self.hub.live_usage_ids():
            try:
                stored = await self.manager.get_task(task_id, prefix=False)
            except TaskNotFoundError:
                continue
            live = self.hub.with_live_progress(stored)
            if live is not stored and live.usage != stored.usage:
                out.append((stored, live))
        return out

    async def _live_sums(
        self, sums: queries.UsageSums, parent: str | None, top: int
    ) -> queries.UsageSums:
        """The store's usage sums with the running tasks' live tokens and cost in place of
        their stored ones (as every task is shown). The parents and trees listed (the store's
        top `top` by stored cost) get their running tasks' live usage and are ranked again; one
        not listed stays out (its stored sum is not read here) until its usage is stored, which
        its manager does at each check."""
        live_tasks = await self._live_tasks()
        if not live_tasks:
            return sums
        # the sums are replaced, never changed: a copy of each map is enough
        out = sums.model_copy(
            update={
                "by_agent": dict(sums.by_agent),
                "by_model": dict(sums.by_model),
                "by_parent": dict(sums.by_parent),
                "by_tree": dict(sums.by_tree),
            }
        )
        for stored, live in live_tasks:
            if parent is not None and stored.parent_session_id != parent:
                continue
            out.total = add_usage(out.total, live.usage, stored.usage)
            agent = queries.no_nul(stored.agent)
            out.by_agent[agent] = add_usage(
                out.by_agent.get(agent, TaskUsage()), live.usage, stored.usage
            )
            for group, key in (
                (out.by_parent, stored.parent_session_id),
                (out.by_tree, stored.tree_id),
            ):
                if key in group:
                    group[key] = add_usage(group[key], live.usage, stored.usage)
            for model in sorted({*live.usage_by_model, *stored.usage_by_model}):
                out.by_model[model] = add_usage(
                    out.by_model.get(model, TaskUsage()),
                    live.usage_by_model.get(model, TaskUsage()),
                    stored.usage_by_model.get(model, TaskUsage()),
                )
        out.by_model = dict(sorted(out.by_model.items()))
        out.by_parent = queries.ranked(out.by_parent, top)
        out.by_tree = queries.ranked(out.by_tree, top)
        return out

    async def events(self, request: Request, query: NoQuery | None = None) -> Response:
        """Server-Sent Events: a snapshot (or a resume), then every task change."""
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
            self.hub, sub, self.hub.stream(sub, self._snapshot, self.closing)
        )

    async def _read_changes(self, since: int) -> queries.TaskChanges:
        return await self.manager.changed_since(since)

    async def _reconcile(self, *, seed: bool = False) -> None:
        try:
            read_from = self.hub.last_id  # events published during the read are newer than it
            began = time.time_ns() // 1_000_000
            since = self._poll_from
            changes = await self._read_changes(since)
            self.hub.apply_changes(
                changes.tasks,
                changes.cleared,
                seed=seed,
                read_from=read_from,
                forget_before=since,
            )
            self._poll_from = began - POLL_OVERLAP_MS
        except Exception:  # a store that failed once may answer next time
            log.exception("reading the store's changes for the event stream failed")

    async def _poll(self, interval: float) -> None:
        """Read the store's changes every `interval` s until the service stops (an indexed
        read of what changed since the last poll, never every task); the first read starts
        `POLL_OVERLAP_MS` ago and only remembers (the snapshots show those tasks)."""
        self._poll_from = time.time_ns() // 1_000_000 - POLL_OVERLAP_MS
        await self._reconcile(seed=True)
        while not self.closing.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), interval)
            if not self.closing.is_set():
                await self._reconcile()

    async def openapi(self, request: Request, query: NoQuery) -> Response:
        """This API's OpenAPI document."""
        return JSONResponse(self.document)
