"""The service over every store (memory, SQLite, a real PostgreSQL): an id holding NUL is not
found on every route, and a store's own message never reaches an HTTP client."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx
import pytest
from asyncagents.service import create_app
from asyncagents.tasks import InProcessBackend, TaskManager, TaskManagerConfig
from asyncagents.tasks.errors import TaskNotFoundError
from asyncagents.tasks.store.postgres import PostgresTaskStore
from tasks_script import Script

if TYPE_CHECKING:
    from conftest import OpenStore

TOKEN = "t" * 64
QUICK = TaskManagerConfig(poll_interval=0.2, notice_retry_initial=0.05, wake="never")


async def test_an_id_holding_nul_is_not_found_on_every_route(open_store: OpenStore) -> None:
    backend = InProcessBackend(Script())
    async with TaskManager(backend, await open_store(), QUICK) as manager:
        parent = str((await backend.create_session(title="parent"))["id"])
        task = await manager.task(parent, "do it", agent="build", description="a job")
        await manager.output(task.id, block=True, timeout=5)
        app = create_app(manager, token=TOKEN, manage_manager=False)
        transport = httpx.ASGITransport(app=app)
        auth = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://service", headers=auth
        ) as http:
            for key in ("%00", f"{task.id}%00", "tsk%00x"):
                shown = key.replace("%00", "\x00")
                for method, path in (
                    ("GET", f"/v1/tasks/{key}"),
                    ("GET", f"/v1/tasks/{key}/messages"),
                    ("POST", f"/v1/tasks/{key}/cancel"),
                ):
                    response = await http.request(method, path)
                    assert response.status_code == 404, path
                    assert response.json() == {"error": "not_found", "detail": f"no task {shown!r}"}
                for tool in ("asyncagents_output", "asyncagents_cancel"):
                    response = await http.post(
                        f"/v1/tools/{tool}",
                        json={"session_id": parent, "arguments": {"task_id": shown}},
                    )
                    assert response.json() == {"text": f"Error: {TaskNotFoundError(shown)}"}
            # the tasks of a parent holding NUL: none
            response = await http.get("/v1/tasks", params={"parent": f"{parent}\x00"})
            assert response.json()["tasks"] == []
            assert (await http.get(f"/v1/tasks/{task.id}")).json()["status"] == "completed"


async def test_a_failing_postgres_store_is_503_without_its_dsn(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # a database that does not exist: every call fails with a message naming the DSN
    dsn = pg_dsn.rsplit("dbname=", 1)[0] + "dbname=no_such_db_4711 connect_timeout=10"
    manager = TaskManager(InProcessBackend(Script()), PostgresTaskStore(dsn), QUICK)
    app = create_app(manager, token=TOKEN, manage_manager=False)
    transport = httpx.ASGITransport(app=app)
    auth = {"authorization": f"Bearer {TOKEN}"}
    caplog.set_level(logging.ERROR)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://service", headers=auth
        ) as http:
            listing = await http.get("/v1/tasks")
            one = await http.get("/v1/tasks/tsk_x")
            tool = await http.post(
                "/v1/tools/asyncagents_list", json={"session_id": "ses_p", "arguments": {}}
            )
    finally:
        await manager.aclose()
    for response in (listing, one):
        assert response.status_code == 503
        assert response.json() == {
            "error": "store_unavailable",
            "detail": "The task store failed; the service's log has the details. Try again "
            "shortly.",
        }
    assert tool.json() == {
        "text": "Error: asyncagents_list failed: the task store is unavailable (the asyncagents "
        "service's log has the details). Call asyncagents_list to see whether it took effect "
        "before trying again."
    }
    for response in (listing, one, tool):
        assert "no_such_db_4711" not in response.text and "127.0.0.1" not in response.text
    assert "no_such_db_4711" in caplog.text  # the operator sees it
