"""`create_app`: the Starlette application of ``asyncagents serve``.

It runs one `TaskManager` (started and closed with the app's lifespan), answers tool calls
from the OpenCode plugin, and checks the bearer token on every route except health. Other
parts of the service (the dashboard) add their routes with `extra_routes`. Every answer has
``X-Content-Type-Options: nosniff``; with `allowed_hosts`, a request for another ``Host`` gets
421 before anything else (`hosts`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .api import DashboardApi
from .auth import BearerAuth
from .errors import ApiError, api_error, http_exception, internal_error
from .headers import NoSniff
from .hosts import AllowedHosts, HostCheck
from .limits import MAX_BODY_BYTES, BodyLimit
from .state import ServiceState
from .tool_routes import ROUTES as TOOL_ROUTES

if TYPE_CHECKING:
    from ..tasks.manager import TaskManager

HEALTH_PATH = "/v1/health"


async def health(request: Request) -> Response:
    """200 once the service (and its manager) is up, 503 once it is stopping; no token."""
    state: ServiceState = request.app.state.service
    if state.draining.is_set():
        return JSONResponse({"status": "stopping"}, status_code=503)
    return JSONResponse({"status": "ok"})


def create_app(
    manager: TaskManager,
    *,
    token: str,
    extra_routes: Sequence[BaseRoute] = (),
    public_paths: Collection[str] = (),
    public_prefixes: Collection[str] = (),
    max_body_bytes: int = MAX_BODY_BYTES,
    manage_manager: bool = True,
    allowed_hosts: AllowedHosts | None = None,
) -> Starlette:
    """The service app over `manager`, guarded by `token` (and by `allowed_hosts`, when
    given: ``asyncagents serve`` always gives them).

    With `manage_manager` the app's lifespan starts the manager and, at shutdown (after the
    calls in flight are answered), closes it with its store and backend.
    `app.state.service` is the `ServiceState` (see `begin_drain`).
    """
    state = ServiceState(manager)
    dashboard = DashboardApi(manager, token=token, closing=state.draining)  # api.py: task API
    extra_routes = [*dashboard.routes, *extra_routes]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_manager:
            await manager.start()
        try:
            yield
        finally:
            state.draining.set()
            if manage_manager:
                await manager.aclose()

    app = Starlette(
        routes=[Route(HEALTH_PATH, health, methods=["GET"]), *TOOL_ROUTES, *extra_routes],
        middleware=[
            Middleware(NoSniff),
            *([] if allowed_hosts is None else [Middleware(HostCheck, allowed=allowed_hosts)]),
            Middleware(
                BearerAuth,
                token=token,
                public_paths={HEALTH_PATH, *public_paths, *dashboard.public_paths},
                public_prefixes=(*public_prefixes, *dashboard.public_prefixes),
            ),
            Middleware(BodyLimit, max_bytes=max_body_bytes),
        ],
        exception_handlers={
            ApiError: api_error,
            HTTPException: http_exception,
            Exception: internal_error,
        },
        lifespan=lifespan,
    )
    app.state.service = state
    app.state.dashboard = dashboard
    return app


def begin_drain(app: Starlette) -> None:
    """Stop taking calls: new ones get 503, blocking output waits answer with the status now."""
    state: ServiceState = app.state.service
    state.draining.set()
