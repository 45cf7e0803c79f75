"""The task API over a real `TaskManager` (in-process backend), through the ASGI transport."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from asyncagents.service.api import STATIC_DIR, UNAUTHORIZED, DashboardApi
from asyncagents.tasks import InProcessBackend, StoreError, Task, TaskManager
from dash_support import TOKEN, Script
from polling import until as wait_for
from starlette.applications import Starlette
from starlette.routing import Route


async def stored(manager: TaskManager, task_id: str) -> Task:
    got = await manager.store.get(task_id)
    assert got is not None
    return got


async def ended(manager: TaskManager, task_id: str, status: str) -> Task:
    async def check() -> bool:
        return (await stored(manager, task_id)).status.value == status

    await wait_for(check, 10, f"{task_id} {status}")
    return await stored(manager, task_id)


async def launch(manager: TaskManager, parent: str, prompt: str, agent: str, desc: str) -> Task:
    return await manager.task(parent, prompt, agent, desc)


@pytest.fixture
async def four(manager: TaskManager, parent: str, script: Script) -> list[Task]:
    """Four tasks of `parent`: completed (2 tool steps), error, cancelled, running (held)."""
    done = await launch(manager, parent, "Summarise the README [tool]", "general", "Summary")
    done = await ended(manager, done.id, "completed")  # with its child session
    failed = await launch(manager, parent, "Deploy it [fail]", "build", "Deploy")
    await ended(manager, failed.id, "error")
    stopped = await launch(manager, parent, "Count words [hold:never]", "general", "Word count")
    await manager.cancel(stopped.id)
    running = await launch(manager, parent, "Look for TODO notes [hold:run]", "explore", "Todos")
    return [done, failed, stopped, running]


# -- auth and errors --------------------------------------------------------------------------

ROUTES = [
    ("GET", "/v1/tasks"),
    ("GET", "/v1/tasks/tsk_x"),
    ("GET", "/v1/tasks/tsk_x/messages"),
    ("POST", "/v1/tasks/tsk_x/cancel"),
    ("GET", "/v1/stats"),
    ("GET", "/v1/events"),
    ("GET", "/v1/openapi.json"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_every_api_route_needs_the_token(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    for header in ("", "Bearer nope", f"Basic {TOKEN}", "Bearer"):
        response = await client.request(method, path, headers={"Authorization": header})
        assert response.status_code == 401, header
        assert response.json() == {"error": "unauthorized", "detail": UNAUTHORIZED}
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_the_routes_check_the_token_without_the_middleware(
    manager: TaskManager, method: str, path: str
) -> None:
    dashboard = DashboardApi(manager, token=TOKEN)
    transport = httpx.ASGITransport(app=Starlette(routes=dashboard.routes))
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as http:
        for header in ("", "Bearer nope"):
            response = await http.request(method, path, headers={"Authorization": header})
            assert response.status_code == 401, header
            assert response.json() == {"error": "unauthorized", "detail": UNAUTHORIZED}
    dashboard.close()


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        (
            "status=done",
            "query parameter 'status': 'done' is not one of "
            "queued, running, resumed, completed, error, cancelled",
        ),
        ("limit=0", "query parameter 'limit': 0 is out of range 1..500"),
        ("limit=501", "query parameter 'limit': 501 is out of range 1..500"),
        ("limit=ten", "query parameter 'limit': 'ten' is not an integer"),
        (
            "sort=age",
            "query parameter 'sort': 'age' is not one of "
            "-created_at, created_at, -updated_at, updated_at",
        ),
        ("cursor=%%%", "query parameter 'cursor': not a cursor this service returned"),
        ("cursor=WzEsMl0", "query parameter 'cursor': not a cursor this service returned"),
        pytest.param(
            "cursor=" + base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("="),
            "query parameter 'cursor': not a cursor this service returned",
            id="cursor-nested-too-deeply",
        ),
        (
            "color=red",
            "query parameter 'color': unknown; this route takes "
            "parent, status, agent, q, sort, limit, cursor",
        ),
        ("q=a&q=b", "query parameter 'q': given more than once"),
    ],
)
async def test_bad_list_parameters_are_named(
    client: httpx.AsyncClient, query: str, detail: str
) -> None:
    response = await client.get(f"/v1/tasks?{query}")
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "detail": detail}


async def test_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/v1/tasks/tsk_missing"),
        ("GET", "/v1/tasks/tsk_missing/messages"),
        ("POST", "/v1/tasks/tsk_missing/cancel"),
    ]:
        response = await client.request(method, path)
        assert response.status_code == 404, path
        assert response.json() == {"error": "not_found", "detail": "no task 'tsk_missing'"}


# -- listing ----------------------------------------------------------------------------------


async def test_list_is_newest_first_and_filters(
    client: httpx.AsyncClient, four: list[Task], parent: str
) -> None:
    done, failed, stopped, running = four
    body = (await client.get("/v1/tasks")).json()
    assert [t["id"] for t in body["tasks"]] == [running.id, stopped.id, failed.id, done.id]
    assert body["total"] == 4
    assert body["next_cursor"] is None
    assert body["tasks"][0]["status"] == "running"
    assert body["tasks"][0]["label"] == running.id

    async def ids(query: str) -> list[str]:
        response = await client.get(f"/v1/tasks?{query}")
        assert response.status_code == 200, response.text
        return [t["id"] for t in response.json()["tasks"]]

    assert await ids("status=running") == [running.id]
    assert await ids("status=error,cancelled") == [stopped.id, failed.id]
    assert await ids("agent=general") == [stopped.id, done.id]
    assert await ids("q=deploy") == [failed.id]  # the description, any case
    assert await ids("q=TODO%20notes") == [running.id]  # the prompt
    assert await ids("q=nothing-like-this") == []
    assert await ids(f"parent={parent}&status=completed") == [done.id]
    assert await ids("parent=ses_other") == []
    assert await ids("sort=created_at") == [done.id, failed.id, stopped.id, running.id]


async def test_cursor_pages_cover_every_task_once(
    client: httpx.AsyncClient, manager: TaskManager, parent: str
) -> None:
    made = [await launch(manager, parent, f"job {i} [hold:x]", "general", f"{i}") for i in range(7)]
    for sort, expected in [
        ("-created_at", [t.id for t in reversed(made)]),
        ("created_at", [t.id for t in made]),
    ]:
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            query = f"/v1/tasks?limit=3&sort={sort}" + (f"&cursor={cursor}" if cursor else "")
            body = (await client.get(query)).json()
            seen += [t["id"] for t in body["tasks"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == expected
        assert pages == 3
    first = (await client.get("/v1/tasks?limit=3")).json()["next_cursor"]
    other = await client.get(f"/v1/tasks?limit=3&sort=created_at&cursor={first}")
    assert other.status_code == 400
    assert other.json()["detail"] == (
        "query parameter 'cursor': made for sort=-created_at, not sort=created_at"
    )


async def test_a_task_with_progress_and_duration(
    client: httpx.AsyncClient, four: list[Task]
) -> None:
    done = four[0]
    body = (await client.get(f"/v1/tasks/{done.id}")).json()
    assert body["id"] == done.id
    assert body["status"] == "completed"
    assert body["result"] == "Done: Summarise the README [tool]"
    assert body["progress"]["tool_calls"] == 2
    assert body["progress"]["last_tool"] == "read"
    assert body["fork_stats"] is None
    assert body["label"] == done.id
    assert isinstance(body["duration_ms"], int) and body["duration_ms"] >= 0
    running = (await client.get(f"/v1/tasks/{four[3].id}")).json()
    assert running["status"] == "running"
    assert running["duration_ms"] is None


# -- messages ---------------------------------------------------------------------------------


async def test_messages_with_the_output_filters(
    client: httpx.AsyncClient, four: list[Task]
) -> None:
    done = four[0]
    body = (await client.get(f"/v1/tasks/{done.id}/messages?full_session=true")).json()
    assert body["task_id"] == done.id
    assert body["session_id"] == done.session_id
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "assistant"]
    assert messages[0]["parts"] == [
        {"type": "text", "text": "Summarise the README [tool]", "truncated": False}
    ]
    assert messages[1]["parts"] == [
        {
            "type": "tool",
            "tool": "bash",
            "status": "completed",
            "input": {"command": "ls"},
            "output": "README.md",
            "truncated": False,
        }
    ]
    assert messages[3]["parts"][0]["text"] == "Done: Summarise the README [tool]"
    ids = [m["id"] for m in messages]
    # the current turn is the whole session for a task never resumed
    turn = (await client.get(f"/v1/tasks/{done.id}/messages")).json()["messages"]
    assert [m["id"] for m in turn] == ids
    tail = (await client.get(f"/v1/tasks/{done.id}/messages?message_limit=1")).json()
    assert [m["id"] for m in tail["messages"]] == ids[-1:]
    since = (await client.get(f"/v1/tasks/{done.id}/messages?since_message_id={ids[1]}")).json()
    assert [m["id"] for m in since["messages"]] == ids[2:]
    both = await client.get(
        f"/v1/tasks/{done.id}/messages?since_message_id={ids[0]}&message_limit=2"
    )
    assert [m["id"] for m in both.json()["messages"]] == ids[2:]
    failed = (await client.get(f"/v1/tasks/{four[1].id}/messages")).json()["messages"]
    assert failed[-1]["error"] == "Invalid request: rejected by the provider"


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        (
            "since_message_id=msg_nope",
            "query parameter 'since_message_id': 'msg_nope' is not in the conversation",
        ),
        ("message_limit=-1", "query parameter 'message_limit': -1 is out of range 0..10000"),
        (
            "full_session=maybe",
            "query parameter 'full_session': 'maybe' is not a boolean (true or false)",
        ),
        (
            "limit=3",
            "query parameter 'limit': unknown; this route takes full_session, "
            "since_message_id, message_limit",
        ),
    ],
)
async def test_bad_message_parameters_are_named(
    client: httpx.AsyncClient, four: list[Task], query: str, detail: str
) -> None:
    response = await client.get(f"/v1/tasks/{four[0].id}/messages?{query}")
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "detail": detail}


# -- cancel -----------------------------------------------------------------------------------


async def test_cancel_a_running_task_then_409(
    client: httpx.AsyncClient, manager: TaskManager, four: list[Task]
) -> None:
    running = four[3]
    response = await client.post(f"/v1/tasks/{running.id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert (await stored(manager, running.id)).status.value == "cancelled"
    again = await client.post(f"/v1/tasks/{running.id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"] == "conflict"
    assert "cancelled" in again.json()["detail"]
    ended_one = await client.post(f"/v1/tasks/{four[0].id}/cancel")
    assert ended_one.status_code == 409


async def test_every_task_route_takes_full_ids_only(
    client: httpx.AsyncClient, manager: TaskManager, four: list[Task]
) -> None:
    running = four[3]
    prefix = running.id[:-3]  # unique among the four, but not an id
    assert [t.id for t in four if t.id.startswith(prefix)] == [running.id]
    for method, path in (
        ("GET", f"/v1/tasks/{prefix}"),
        ("GET", f"/v1/tasks/{prefix}/messages"),
        ("POST", f"/v1/tasks/{prefix}/cancel"),
    ):
        response = await client.request(method, path)
        assert response.status_code == 404, path
        assert response.json() == {"error": "not_found", "detail": f"no task {prefix!r}"}
    assert (await stored(manager, running.id)).status.value == "running"
    for method, path in (
        ("GET", f"/v1/tasks/{running.id}"),
        ("GET", f"/v1/tasks/{running.id}/messages"),
        ("POST", f"/v1/tasks/{running.id}/cancel"),
    ):
        assert (await client.request(method, path)).status_code == 200, path


# -- stats ------------------------------------------------------------------------------------


async def test_stats_counts_tools_and_durations(
    client: httpx.AsyncClient, four: list[Task], parent: str
) -> None:
    body = (await client.get("/v1/stats")).json()
    assert body["tasks"] == 4
    assert body["by_status"] == {
        "queued": 0,
        "running": 1,
        "resumed": 0,
        "completed": 1,
        "error": 1,
        "cancelled": 1,
    }
    assert body["by_agent"] == {"build": 1, "explore": 1, "general": 2}
    assert body["tool_calls"] == {
        "total": 2,
        "by_name": {"bash": 1, "read": 1},
        "unreadable_tasks": 0,
    }
    durations = body["durations"]
    assert durations["count"] == 3  # the ended ones
    assert 0 <= durations["min_ms"] <= durations["median_ms"] <= durations["p95_ms"]
    assert durations["p95_ms"] <= durations["max_ms"]
    assert (await client.get("/v1/stats?parent=ses_other")).json()["tasks"] == 0
    bad = await client.get("/v1/stats?agent=x")
    assert bad.status_code == 400
    assert bad.json() == {
        "error": "bad_request",
        "detail": "query parameter 'agent': unknown; this route takes parent, top",
    }
    # cached counts of ended turns give the same answer
    assert (await client.get("/v1/stats")).json()["tool_calls"] == body["tool_calls"]


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("top=-1", "query parameter 'top': -1 is out of range 0..1000"),
        ("top=1001", "query parameter 'top': 1001 is out of range 0..1000"),
        ("top=many", "query parameter 'top': 'many' is not an integer"),
        ("top=1&top=2", "query parameter 'top': given more than once"),
    ],
)
async def test_bad_stats_parameters_are_named(
    client: httpx.AsyncClient, query: str, detail: str
) -> None:
    response = await client.get(f"/v1/stats?{query}")
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "detail": detail}


def test_duration_summary_and_percentile() -> None:
    from asyncagents.service.api import duration_summary

    assert duration_summary([]) == {
        "count": 0,
        "min_ms": None,
        "median_ms": None,
        "p95_ms": None,
        "max_ms": None,
    }
    values = list(range(1, 101))  # 1..100 ms
    assert duration_summary(values) == {
        "count": 100,
        "min_ms": 1,
        "median_ms": 50.5,
        "p95_ms": 95,
        "max_ms": 100,
    }
    assert duration_summary([7]) == {
        "count": 1,
        "min_ms": 7,
        "median_ms": 7,
        "p95_ms": 7,
        "max_ms": 7,
    }


# -- OpenAPI and the page ---------------------------------------------------------------------


async def test_openapi_lists_every_route(
    client: httpx.AsyncClient, manager: TaskManager, app: Starlette
) -> None:
    doc = (await client.get("/v1/openapi.json")).json()
    dashboard = DashboardApi(manager, token=TOKEN)
    assert doc["openapi"] == "3.1.0"
    routes = {
        (route.path, method.lower())
        for route in dashboard.routes
        if isinstance(route, Route) and route.path.startswith("/v1/")
        for method in (route.methods or ()) - {"HEAD"}
    }
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert documented == routes
    served = {r.path for r in app.routes if isinstance(r, Route)}
    assert {path for path, _ in routes} <= served
    dashboard.close()
    for path, method in documented:
        operation = doc["paths"][path][method]
        assert "401" in operation["responses"], path
        for param in operation.get("parameters", []):
            if param["in"] == "path":
                assert "{" + param["name"] + "}" in path
    schemas = doc["components"]["schemas"]
    assert set(schemas["Task"]["properties"]) >= set(Task.model_fields) | {"label"}
    assert "TaskProgress" in schemas


async def test_the_page_is_public_and_self_contained(client: httpx.AsyncClient) -> None:
    page = await client.get("/", headers={"Authorization": ""})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    for name in ("dashboard.js", "dashboard.css"):
        asset = await client.get(f"/static/{name}", headers={"Authorization": ""})
        assert asset.status_code == 200
        assert f"/static/{name}" in page.text
    # nothing is fetched from the network: no absolute URL in any shipped file
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path.name


async def test_a_running_task_shows_the_progress_its_manager_reported(
    client: httpx.AsyncClient, manager: TaskManager, parent: str
) -> None:
    running = await launch(manager, parent, "Scan [tool] [hold:scan]", "general", "Scan")

    async def reported() -> bool:
        body = (await client.get(f"/v1/tasks/{running.id}")).json()
        return bool(body["progress"]["last_tool"] == "read")

    await wait_for(reported, 10, "the reported progress")
    assert (await stored(manager, running.id)).progress.last_tool is None  # not stored yet
    listed = (await client.get("/v1/tasks?status=running")).json()["tasks"]
    assert listed[0]["progress"]["last_tool"] == "read"


async def test_messages_of_a_deleted_child_session_are_404(
    client: httpx.AsyncClient, backend: InProcessBackend, four: list[Task]
) -> None:
    done = four[0]
    assert done.session_id is not None
    await backend.delete_session(done.session_id)
    response = await client.get(f"/v1/tasks/{done.id}/messages")
    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "detail": f"the child session {done.session_id} of task {done.id} no longer exists",
    }


async def test_a_failing_store_is_503_and_its_message_stays_in_the_log(
    client: httpx.AsyncClient,
    manager: TaskManager,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "PostgreSQL task store 'host=db.internal user=tasks dbname=agents'"

    async def broken(*args: Any, **kwargs: Any) -> list[Task]:
        raise StoreError(f"{secret}: listing tasks failed: disk I/O error")

    monkeypatch.setattr(manager.store, "query_tasks", broken)
    monkeypatch.setattr(manager.store, "task_stats", broken)
    for path in ("/v1/tasks", "/v1/stats"):
        caplog.clear()
        response = await client.get(path)
        assert response.status_code == 503, path
        assert response.json() == {
            "error": "store_unavailable",
            "detail": "The task store failed; the service's log has the details. Try again "
            "shortly.",
        }
        assert "db.internal" not in response.text
        assert f"{secret}: listing tasks failed: disk I/O error" in caplog.text
        assert f"GET {path}: the task store failed" in caplog.text


# -- the document follows the routes ------------------------------------------------------------


async def test_each_route_takes_exactly_the_query_parameters_documented(
    client: httpx.AsyncClient, four: list[Task]
) -> None:
    doc = (await client.get("/v1/openapi.json")).json()
    task_id = four[3].id
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            documented = [p["name"] for p in operation["parameters"] if p["in"] == "query"]
            url = path.replace("{task_id}", task_id) + "?zz_unknown=1"
            response = await client.request(method, url)
            assert response.status_code == 400, url
            taken = response.json()["detail"].split("this route takes ", 1)[1]
            assert taken == (", ".join(documented) or "none"), path


async def test_answers_have_the_fields_their_documented_schemas_list(
    client: httpx.AsyncClient, four: list[Task]
) -> None:
    doc = (await client.get("/v1/openapi.json")).json()
    schemas = doc["components"]["schemas"]

    def fields(name: str) -> set[str]:
        return set(schemas[name]["properties"])

    def documented(path: str, method: str) -> str:
        ref = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]
        return str(ref["schema"]["$ref"]).rsplit("/", 1)[1]

    done, running = four[0], four[3]
    page = (await client.get("/v1/tasks?limit=2")).json()
    assert documented("/v1/tasks", "get") == "TaskPage"
    assert set(page) == fields("TaskPage")
    assert all(set(t) == fields("Task") for t in page["tasks"])
    detail = (await client.get(f"/v1/tasks/{done.id}")).json()
    assert documented("/v1/tasks/{task_id}", "get") == "TaskDetail"
    assert set(detail) == fields("TaskDetail") == fields("Task") | {"duration_ms", "parent_title"}
    stats = (await client.get("/v1/stats")).json()
    assert documented("/v1/stats", "get") == "Stats"
    assert set(stats) == fields("Stats")
    assert set(stats["tool_calls"]) == fields("ToolCalls")
    assert set(stats["durations"]) == fields("DurationSummary")
    assert set(stats["usage"]) == fields("UsageSums")
    assert {"parents", "trees"} <= fields("UsageSums")
    top = next(p for p in doc["paths"]["/v1/stats"]["get"]["parameters"] if p["name"] == "top")
    assert top["schema"] == {"default": 100, "maximum": 1000, "minimum": 0, "type": "integer"}
    talk = (await client.get(f"/v1/tasks/{done.id}/messages?full_session=true")).json()
    assert documented("/v1/tasks/{task_id}/messages", "get") == "Conversation"
    assert set(talk) == fields("Conversation")
    assert all(set(m) == fields("MessageView") for m in talk["messages"])
    parts = [p for m in talk["messages"] for p in m["parts"]]
    assert parts and all(set(p) <= fields("MessagePart") for p in parts)
    cancelled = (await client.post(f"/v1/tasks/{running.id}/cancel")).json()
    assert documented("/v1/tasks/{task_id}/cancel", "post") == "Task"
    assert set(cancelled) == fields("Task")
    limit = next(p for p in doc["paths"]["/v1/tasks"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"] == {"default": 100, "maximum": 500, "minimum": 1, "type": "integer"}


def _usage(messages: int) -> dict[str, Any]:
    """What `messages` assistant messages of STEP_USAGE add up to."""
    return {
        "input_tokens": 10 * messages,
        "output_tokens": 4 * messages,
        "reasoning_tokens": 1 * messages,
        "cache_read_tokens": 2 * messages,
        "cache_write_tokens": 3 * messages,
        "cost": 0.5 * messages,
    }


async def test_tokens_and_cost_per_task_and_summed_by_agent_model_parent_and_tree(
    client: httpx.AsyncClient, manager: TaskManager, backend: InProcessBackend, script: Script
) -> None:
    from asyncagents.service.event_stream import event_task_json

    backend.step_usage = {
        "tokens": {"input": 10, "output": 4, "reasoning": 1, "cache": {"read": 2, "write": 3}},
        "cost": 0.5,
    }
    one = str((await backend.create_session(title="one"))["id"])
    two = str((await backend.create_session(title="two"))["id"])
    tools = await launch(manager, one, "Read it [tool]", "general", "Tools")  # 3 messages
    plain = await launch(manager, one, "Say hi", "build", "Hi")  # 1 message
    await ended(manager, tools.id, "completed")
    await ended(manager, plain.id, "completed")
    held = await launch(manager, two, "Wait [hold:usage]", "general", "Held")  # none yet
    body = (await client.get("/v1/tasks")).json()
    by_id = {t["id"]: t for t in body["tasks"]}
    assert by_id[tools.id]["usage"] == _usage(3)
    assert by_id[plain.id]["usage"] == _usage(1)
    assert by_id[held.id]["usage"] == _usage(0)
    assert by_id[tools.id]["usage_by_model"] == {"inprocess/inprocess": _usage(3)}
    assert body["usage"] == _usage(4)
    assert (await client.get(f"/v1/tasks?parent={two}")).json()["usage"] == _usage(0)
    assert (await client.get(f"/v1/tasks/{tools.id}")).json()["usage"] == _usage(3)
    stats = (await client.get("/v1/stats")).json()["usage"]
    assert stats == {
        "total": _usage(4),
        "by_agent": {"build": _usage(1), "general": _usage(3)},
        "by_model": {"inprocess/inprocess": _usage(4)},
        "by_parent": {one: _usage(4), two: _usage(0)},
        "by_tree": {one: _usage(4), two: _usage(0)},
        "parents": 2,
        "trees": 2,
    }
    assert list(stats["by_parent"]) == [one, two]  # highest cost first
    top = (await client.get("/v1/stats?top=1")).json()["usage"]
    assert (top["by_parent"], top["by_tree"]) == ({one: _usage(4)}, {one: _usage(4)})
    assert (top["parents"], top["trees"], top["total"]) == (2, 2, _usage(4))
    assert (await client.get(f"/v1/stats?parent={one}")).json()["usage"]["total"] == _usage(4)
    assert event_task_json(await stored(manager, tools.id))["usage"] == _usage(3)
    script.release("usage")
    done = await ended(manager, held.id, "completed")
    assert done.usage.model_dump() == _usage(1)


async def test_live_usage_moves_the_listed_parents_and_trees_only(
    manager: TaskManager, four: list[Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running tasks' live usage goes into the parents and trees the store listed (ranked
    again, still at most `top`); one not listed stays out until its usage is stored."""
    from asyncagents.tasks.models import TaskUsage
    from asyncagents.tasks.queries import UsageSums

    def cost(value: float) -> TaskUsage:
        return TaskUsage(input_tokens=1, cost=value)

    def running(parent: str, stored: float, live: float) -> tuple[Task, Task]:
        task = four[3].model_copy(
            update={
                "parent_session_id": parent,
                "root_session_id": f"t{parent}",
                "usage": cost(stored),
                "usage_by_model": {},
            }
        )
        return task, task.model_copy(update={"usage": cost(live)})

    dashboard = DashboardApi(manager, token=TOKEN)
    pairs = [running("p_b", 1.0, 4.0), running("p_c", 0.5, 20.0)]

    async def live_tasks() -> list[tuple[Task, Task]]:
        return pairs

    monkeypatch.setattr(dashboard, "_live_tasks", live_tasks)
    sums = UsageSums(
        total=cost(9.5),
        by_agent={"explore": cost(9.5)},
        by_parent={"p_a": cost(5.0), "p_b": cost(4.0)},
        by_tree={"tp_a": cost(5.0), "tp_b": cost(4.0)},
        parents=3,
        trees=3,
    )
    out = await dashboard._live_sums(sums, None, 2)
    assert out.total == out.by_agent["explore"] == cost(32.0)
    assert list(out.by_parent.items()) == [("p_b", cost(7.0)), ("p_a", cost(5.0))]
    assert list(out.by_tree.items()) == [("tp_b", cost(7.0)), ("tp_a", cost(5.0))]
    assert (out.parents, out.trees) == (3, 3)
    assert sums.by_parent == {"p_a": cost(5.0), "p_b": cost(4.0)}  # the store's, unchanged
    one = await dashboard._live_sums(sums, None, 1)
    assert list(one.by_parent) == ["p_b"] and list(one.by_tree) == ["tp_b"]
    dashboard.close()
