"""``POST /v1/tools/{name}``: one agent's tool call, answered with the tool's text.

The body is ``{"session_id", "agent", "arguments"}`` as JSON (``Content-Type:
application/json`` or another ``+json`` type); the answer ``{"text"}``. A tool's own problems
(bad arguments, unknown task, unknown tool) are 200 with a text for the agent; only the body is
an HTTP error: 415 when it is not declared JSON, 422 when it is malformed (also when it is
nested too deeply to parse).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..tasks.tools import run_tool
from .errors import ApiError
from .state import ServiceState


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


class ToolCall(BaseModel):
    """The body of a tool call: who calls, and the arguments as the model gave them."""

    model_config = ConfigDict(extra="forbid")

    #: a session id: no NUL (no store could hold it as a key)
    session_id: Annotated[str, AfterValidator(_no_nul)] = Field(min_length=1, max_length=500)
    agent: str | None = Field(default=None, max_length=500)
    #: any JSON: `run_tool` turns everything that is not an object into a text for the agent
    arguments: Any = None


def json_content_problem(content_type: str | None) -> str | None:
    """Why a body with this ``Content-Type`` is not declared JSON, or None when it is
    (``application/json``, or any ``+json`` type, with any parameters)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.endswith("+json") and "/" in media):
        return None
    got = f"got {content_type!r}" if content_type else "none was given"
    return f"The body must be JSON sent with Content-Type: application/json ({got})."


def _problems(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        lines.append(f"{where}: {err['msg']}")
    return "; ".join(lines)


async def call_tool(request: Request) -> Response:
    """Run one tool call for the calling session; 503 once the service is stopping."""
    state: ServiceState = request.app.state.service
    if state.draining.is_set():
        raise ApiError(
            503, "shutting_down", "The asyncagents service is stopping; call again once it is up."
        )
    problem = json_content_problem(request.headers.get("content-type"))
    if problem is not None:
        raise ApiError(415, "unsupported_media_type", problem)
    try:
        payload = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(422, "invalid_body", f"The body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(
            422,
            "invalid_body",
            "The body is nested too deeply to parse (RecursionError); send flatter JSON.",
        ) from None
    try:
        call = ToolCall.model_validate(payload)
    except ValidationError as exc:
        raise ApiError(422, "invalid_body", _problems(exc)) from None
    name = request.path_params["name"]
    with state.in_flight():
        text = await run_tool(
            state.manager,
            call.session_id,
            name,
            call.arguments,
            agent=call.agent,
            interrupt=state.draining,
        )
    return JSONResponse({"text": text})


ROUTES = [Route("/v1/tools/{name}", call_tool, methods=["POST"])]
