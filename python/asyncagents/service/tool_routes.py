"""``POST /v1/tools/{name}``: one agent's tool call, answered with the tool's text.

The body is ``{"session_id", "agent", "arguments"}``; the answer ``{"text"}``. A tool's own
problems (bad arguments, unknown task, unknown tool) are 200 with a text for the agent; only a
malformed body is an HTTP error (422).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..tasks.tools import run_tool
from .errors import error_response
from .state import ServiceState


class ToolCall(BaseModel):
    """The body of a tool call: who calls, and the arguments as the model gave them."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1, max_length=500)
    agent: str | None = Field(default=None, max_length=500)
    #: any JSON: `run_tool` turns everything that is not an object into a text for the agent
    arguments: Any = None


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
        return error_response(
            503, "shutting_down", "The asyncagents service is stopping; call again once it is up."
        )
    try:
        payload = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(422, "invalid_body", f"The body is not valid JSON: {exc}")
    try:
        call = ToolCall.model_validate(payload)
    except ValidationError as exc:
        return error_response(422, "invalid_body", _problems(exc))
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
