"""A password-protected ``opencode serve`` (``OPENCODE_SERVER_PASSWORD``): the backend sends
OpenCode's basic auth on every call and on the event stream, ``asyncagents serve`` takes the
credentials from the environment or a password file, and a refusal (HTTP 401) is a setup
problem with a text that says how to fix it, logged once, never "try again shortly"."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asyncagents.service import load_or_create_token
from asyncagents.tasks import (
    BackendAuthError,
    InMemoryTaskStore,
    OpenCodeBackend,
    OpenCodeCredentials,
    TaskManager,
    TaskStatus,
    run_tool,
)
from e2e_support import AGENT, OpenCodeServer, manager_config, opencode_binary
from fake_model import FakeModel
from plugin_support import ServiceProcess

PASSWORD = secrets.token_urlsafe(18)


@pytest.fixture(scope="module")
def secured(
    fake_model: FakeModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenCodeServer]:
    server = OpenCodeServer(
        opencode_binary(), fake_model.base_url, tmp_path_factory.mktemp("secured")
    )
    server.password = PASSWORD
    try:
        yield server.start()
    finally:
        server.stop()


def refusal(url: str, request: str, *, given: bool) -> str:
    """The exact text of OpenCode's refusal of `request` ("POST <url>/session")."""
    why = (
        'it does not accept the username "opencode" and the password given'
        if given
        else "it is protected by a password and none was given"
    )
    return (
        f"OpenCode server at {url} refused {request} with HTTP 401: {why}. This is a setup "
        "problem that retrying will not fix: set OPENCODE_SERVER_PASSWORD (and "
        'OPENCODE_SERVER_USERNAME if it is not "opencode") to the credentials `opencode serve` '
        "runs with, in the environment of `asyncagents serve` (or give it "
        "--opencode-password-file), and restart it."
    )


async def test_the_server_really_wants_the_password(secured: OpenCodeServer) -> None:
    async with httpx.AsyncClient(base_url=secured.base_url, timeout=10) as http:
        assert (await http.get("/global/health")).status_code == 401
        assert (await http.get("/event", auth=("opencode", "wrong"))).status_code == 401
        ok = await http.get("/global/health", auth=("opencode", PASSWORD))
        assert ok.status_code == 200 and ok.json()["healthy"] is True


async def test_a_task_runs_through_a_secured_server(secured: OpenCodeServer) -> None:
    credentials = OpenCodeCredentials("opencode", PASSWORD)
    assert PASSWORD not in repr(credentials)
    async with (
        OpenCodeBackend(secured.base_url, credentials=credentials) as backend,
        TaskManager(backend, InMemoryTaskStore(), manager_config(poll_interval=30.0)) as manager,
    ):
        # the event stream is open (it sends the credentials too): completions come from it,
        # not from the periodic check 30 s away
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        parent = str((await backend.create_session(title="secured parent"))["id"])
        task = await manager.task(parent, "say hi", AGENT, "through the password")
        out = await manager.output(task.id, block=True, timeout=60)
        assert out.task.status is TaskStatus.COMPLETED, out.task.error
        assert out.task.result == "Reply to: say hi"
        assert PASSWORD not in repr(backend.__dict__)


@pytest.mark.parametrize("password", [None, "wrong"])
async def test_a_refusal_is_a_setup_error_with_its_fix(
    secured: OpenCodeServer, password: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    credentials = OpenCodeCredentials("opencode", password or "")
    async with (
        OpenCodeBackend(secured.base_url, credentials=credentials) as backend,
        TaskManager(
            backend, InMemoryTaskStore(), manager_config(follow_events=False, poll_interval=30.0)
        ) as manager,
    ):
        with pytest.raises(BackendAuthError) as raised:
            await backend.status()
        assert raised.value.status_code == 401
        url = secured.base_url
        expected = refusal(url, f"GET {url}/session/status", given=password is not None)
        assert str(raised.value) == expected
        texts = [
            await run_tool(
                manager, "ses_caller", "asyncagents_task", {"prompt": "hi", "agent": AGENT}
            )
            for _ in range(3)
        ]
        create = refusal(url, f"POST {url}/session", given=password is not None)
        assert texts == [f"Error: {create}"] * 3
    logged = [r for r in caplog.records if r.name == "asyncagents.tasks.opencode"]
    assert [(r.levelname, r.getMessage()) for r in logged] == [("ERROR", expected)]


def _service(
    secured: OpenCodeServer, root: Path, env: dict[str, str], *args: str
) -> ServiceProcess:
    root.mkdir()
    base = {k: v for k, v in os.environ.items() if k.startswith("OPENCODE_SERVER_")}
    cleared = dict.fromkeys(base, "")
    return ServiceProcess(
        root, secured.base_url, root / "state", env={**cleared, **env}, args=args
    ).start()


async def _tool(service: ServiceProcess, parent: str, name: str, arguments: dict[str, Any]) -> str:
    """One tool call to the service, as the plugin makes it, for the session `parent`."""
    token, _ = load_or_create_token(service.state / "asyncagents" / "token")
    async with httpx.AsyncClient(base_url=service.url, timeout=120) as http:
        response = await http.post(
            f"/v1/tools/{name}",
            headers={"authorization": f"Bearer {token}"},
            json={"session_id": parent, "agent": AGENT, "arguments": arguments},
        )
    assert response.status_code == 200, response.text
    text: str = response.json()["text"]
    return text


@pytest.fixture
async def oc(secured: OpenCodeServer) -> AsyncIterator[OpenCodeBackend]:
    credentials = OpenCodeCredentials("opencode", PASSWORD)
    async with OpenCodeBackend(secured.base_url, credentials=credentials) as client:
        yield client


@pytest.mark.parametrize("source", ["environment", "password file"])
async def test_serve_takes_the_credentials(
    secured: OpenCodeServer, oc: OpenCodeBackend, tmp_path: Path, source: str
) -> None:
    if source == "environment":
        service = _service(secured, tmp_path / "svc", {"OPENCODE_SERVER_PASSWORD": PASSWORD})
    else:
        secret = tmp_path / "opencode-password"
        secret.write_text(PASSWORD + "\n")
        service = _service(secured, tmp_path / "svc", {}, "--opencode-password-file", str(secret))
    try:
        parent = str((await oc.create_session(title="served parent"))["id"])
        started = await _tool(
            service,
            parent,
            "asyncagents_task",
            {"prompt": "say hi", "agent": AGENT, "description": "hi"},
        )
        match = re.search(r"tsk_[0-9a-f]+", started)
        assert match, started
        done = await _tool(
            service,
            parent,
            "asyncagents_output",
            {"task_id": match.group(0), "block": True, "timeout": 60},
        )
        assert done.rsplit("\n", 1)[0].endswith(
            "[completed] build: hi\n\nResult:\nReply to: say hi"
        ), done
    finally:
        service.stop()
    log = service.log_path.read_text(errors="replace")
    assert PASSWORD not in log and "refused" not in log, log


async def test_serve_with_a_wrong_password_says_how_to_fix_it_and_logs_it_once(
    secured: OpenCodeServer, tmp_path: Path
) -> None:
    service = _service(secured, tmp_path / "svc", {"OPENCODE_SERVER_PASSWORD": "not-it"})
    url = secured.base_url
    try:
        texts = [
            await _tool(service, "ses_anyone", "asyncagents_task", {"prompt": "hi", "agent": AGENT})
            for _ in range(3)
        ]
        create = refusal(url, f"POST {url}/session", given=True)
        assert texts == [f"Error: {create}"] * 3
        # the event stream and the periodic checks are refused too, again and again
        await asyncio.sleep(3)
    finally:
        service.stop()
    lines = service.log_path.read_text(errors="replace").splitlines()
    health = refusal(url, f"GET {url}/global/health", given=True)
    assert lines.count(f"asyncagents serve: warning: {health}") == 1
    refusals = [line for line in lines if " refused " in line and "warning" not in line]
    assert len(refusals) == 1, lines
    assert re.fullmatch(
        re.escape(refusal(url, "METHOD", given=True)).replace("METHOD", r"(GET|POST) \S+"),
        refusals[0],
    ), refusals[0]
    assert "not-it" not in "\n".join(lines)
