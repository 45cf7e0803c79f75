"""The HTTP surface of ``asyncagents serve``: health, tool calls, token, errors as JSON."""

from __future__ import annotations

import asyncio
import json

import httpx
from asyncagents.service import begin_drain, create_app
from asyncagents.tasks import TaskManager
from service_support import TOKEN


async def test_health_needs_no_token(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/health", headers={"authorization": ""})
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_tool_call_answers_the_tools_text(client: httpx.AsyncClient, parent: str) -> None:
    response = await client.post(
        "/v1/tools/asyncagents_list",
        json={"session_id": parent, "agent": "build", "arguments": {}},
    )
    assert response.status_code == 200
    assert response.json() == {"text": "No background tasks found"}


async def test_launch_through_the_route_then_read_it(
    client: httpx.AsyncClient, manager: TaskManager, parent: str
) -> None:
    response = await client.post(
        "/v1/tools/asyncagents_task",
        json={
            "session_id": parent,
            "agent": "build",
            "arguments": {"prompt": "do it", "agent": "build", "description": "a job"},
        },
    )
    assert response.status_code == 200
    (task,) = await manager.list(parent)
    assert response.json()["text"].startswith(f"Background task started: `{task.id}`\n")
    response = await client.post(
        "/v1/tools/asyncagents_output",
        json={"session_id": parent, "arguments": {"task_id": task.id, "block": "true"}},
    )
    assert response.json()["text"] == (
        f"Task `{task.id}` [completed] build: a job\n\nResult:\nReply to: do it\n"
        "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."
    )


async def test_a_tools_own_problem_is_200_with_a_text(
    client: httpx.AsyncClient, parent: str
) -> None:
    response = await client.post(
        "/v1/tools/asyncagents_nope", json={"session_id": parent, "arguments": {}}
    )
    assert response.status_code == 200
    assert response.json() == {
        "text": "Error: unknown tool 'asyncagents_nope'; the task tools are asyncagents_task, "
        "asyncagents_output, asyncagents_list, asyncagents_cancel, asyncagents_clear."
    }


async def test_missing_or_wrong_token_is_401(client: httpx.AsyncClient, parent: str) -> None:
    body = {"session_id": parent, "arguments": {}}
    for header in ("", "Bearer wrong", f"Basic {TOKEN}", TOKEN):
        response = await client.post(
            "/v1/tools/asyncagents_list", json=body, headers={"authorization": header}
        )
        assert response.status_code == 401, header
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


async def test_unknown_route_and_method_are_json_errors(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "No route GET /v1/nothing."}
    response = await client.get("/v1/tools/asyncagents_list")
    assert response.status_code == 405
    assert response.json() == {
        "error": "method_not_allowed",
        "detail": "/v1/tools/asyncagents_list does not take GET.",
    }


JSON_TYPE = {"content-type": "application/json"}


async def test_malformed_bodies_are_422(client: httpx.AsyncClient, parent: str) -> None:
    url = "/v1/tools/asyncagents_list"
    response = await client.post(url, content=b"{not json", headers=JSON_TYPE)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_body"
    assert response.json()["detail"].startswith("The body is not valid JSON: ")
    cases = {
        json.dumps({"arguments": {}}): "session_id: Field required",
        json.dumps({"session_id": ""}): "session_id: String should have at least 1 character",
        json.dumps({"session_id": 5}): "session_id: Input should be a valid string",
        json.dumps([1, 2]): "(body): Input should be a valid dictionary or instance of ToolCall",
        json.dumps({"session_id": parent, "x": 1}): "x: Extra inputs are not permitted",
        json.dumps({"session_id": "ses\x00x"}): (
            "session_id: Value error, must not contain a NUL character"
        ),
    }
    for body, detail in cases.items():
        response = await client.post(url, content=body.encode(), headers=JSON_TYPE)
        assert response.status_code == 422, body
        assert response.json() == {"error": "invalid_body", "detail": detail}


async def test_a_body_over_the_cap_is_413(client: httpx.AsyncClient, parent: str) -> None:
    body = {"session_id": parent, "arguments": {"prompt": "x" * 70_000}}
    response = await client.post("/v1/tools/asyncagents_task", json=body)
    assert response.status_code == 413
    assert response.json() == {
        "error": "body_too_large",
        "detail": "The request body is over the service's limit of 65536 bytes.",
    }


async def test_a_streamed_body_over_the_cap_is_413(client: httpx.AsyncClient) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b"x" * 8192

    response = await client.post("/v1/tools/asyncagents_task", content=chunks())
    assert response.status_code == 413


async def test_drain_answers_calls_in_flight_and_refuses_new_ones(
    manager: TaskManager, parent: str
) -> None:
    app = create_app(manager, token=TOKEN, manage_manager=False)
    headers = {"authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://service", headers=headers, timeout=30
    ) as http:
        task = await manager.task(parent, "[hold] long job", agent="build", description="held")
        waiting = asyncio.ensure_future(
            http.post(
                "/v1/tools/asyncagents_output",
                json={"session_id": parent, "arguments": {"task_id": task.id, "block": True}},
            )
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()
        begin_drain(app)
        answer = await asyncio.wait_for(waiting, 5)
        assert answer.status_code == 200
        assert answer.json()["text"].startswith(f"Task `{task.id}` [running] build: held\n")
        refused = await http.post(
            "/v1/tools/asyncagents_list", json={"session_id": parent, "arguments": {}}
        )
        assert refused.status_code == 503
        assert refused.json() == {
            "error": "shutting_down",
            "detail": "The asyncagents service is stopping; call again once it is up.",
        }
        health = await http.get("/v1/health")
        assert (health.status_code, health.json()) == (503, {"status": "stopping"})


async def test_json_nested_too_deeply_is_422_not_500(client: httpx.AsyncClient) -> None:
    for depth in (1_000, 5_000, 30_000):
        for body in ("[" * depth + "]" * depth, '{"session_id": "s", "arguments": ' + "[" * depth):
            response = await client.post(
                "/v1/tools/asyncagents_list", content=body.encode(), headers=JSON_TYPE
            )
            assert response.status_code == 422, depth
            assert response.json() == {
                "error": "invalid_body",
                "detail": "The body is nested too deeply to parse (RecursionError); send "
                "flatter JSON.",
            }
    # the same nesting inside arguments given as a JSON text: a text for the agent
    nested = "[" * 5_000 + "]" * 5_000
    response = await client.post(
        "/v1/tools/asyncagents_list", json={"session_id": "ses_x", "arguments": nested}
    )
    assert response.json() == {
        "text": "Error: the arguments of asyncagents_list are not valid JSON (maximum recursion "
        "depth exceeded while decoding a JSON array from a unicode string)."
    }


async def test_a_body_not_declared_json_is_415(client: httpx.AsyncClient, parent: str) -> None:
    body = json.dumps({"session_id": parent, "arguments": {}}).encode()
    url = "/v1/tools/asyncagents_list"
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "json", None):
        headers = {} if content_type is None else {"content-type": content_type}
        response = await client.post(url, content=body, headers=headers)
        assert response.status_code == 415, content_type
        got = f"got {content_type!r}" if content_type else "none was given"
        assert response.json() == {
            "error": "unsupported_media_type",
            "detail": f"The body must be JSON sent with Content-Type: application/json ({got}).",
        }
    for content_type in (
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/vnd.asyncagents+json",
    ):
        response = await client.post(url, content=body, headers={"content-type": content_type})
        assert response.status_code == 200, content_type
        assert response.json() == {"text": "No background tasks found"}


async def test_every_answer_has_nosniff(client: httpx.AsyncClient, parent: str) -> None:
    answers = [
        await client.get("/v1/health"),
        await client.get("/"),
        await client.get("/static/dashboard.js"),
        await client.get("/v1/tasks"),
        await client.get("/v1/tasks/tsk_missing"),
        await client.get("/v1/nothing"),
        await client.get("/v1/tasks", headers={"authorization": ""}),
        await client.post("/v1/tools/asyncagents_list", json={"session_id": parent}),
        await client.post("/v1/tools/asyncagents_list", content=b"[", headers=JSON_TYPE),
        await client.post("/v1/tools/asyncagents_list", content=b"{}"),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 404, 404, 401, 200, 422, 415]
    for answer in answers:
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], answer.url


async def test_a_500_has_nosniff_too(manager: TaskManager) -> None:
    from starlette.routing import Route

    async def boom(request: object) -> None:
        raise RuntimeError("boom")

    app = create_app(
        manager, token=TOKEN, manage_manager=False, extra_routes=[Route("/v1/boom", boom)]
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:
        response = await http.get("/v1/boom", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 500
    assert response.json() == {
        "error": "internal_error",
        "detail": "RuntimeError while serving /v1/boom.",
    }
    assert response.headers["x-content-type-options"] == "nosniff"
