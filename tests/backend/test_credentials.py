"""OpenCode's server credentials (``OPENCODE_SERVER_PASSWORD``): sent as basic auth on every
call and on the event stream, read from the environment or a file, never shown; a 401 or 403
is a `BackendAuthError` logged once."""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from asyncagents.tasks import (
    BackendAuthError,
    BackendHTTPError,
    OpenCodeBackend,
    OpenCodeCredentials,
    PromptRequest,
)
from subprocess_env import python_path

URL = "http://opencode.test"


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _backend(
    handler: httpx.MockTransport, credentials: OpenCodeCredentials | None
) -> OpenCodeBackend:
    client = httpx.AsyncClient(base_url=URL, transport=handler)
    return OpenCodeBackend(URL, client=client, timeout=5, credentials=credentials)


async def test_every_call_and_the_event_stream_send_the_credentials() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        if request.url.path == "/event":
            body = b'data: {"type":"server.connected","properties":{}}\n\n'
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        if request.url.path == "/session/status":
            return httpx.Response(200, json={})
        return httpx.Response(200, json={"id": "ses_1"})

    backend = _backend(httpx.MockTransport(handler), OpenCodeCredentials("me", "s3cret:x"))
    await backend.create_session()
    await backend.status()
    await backend.prompt_async("ses_1", PromptRequest(text="hi"))
    events = [event async for event in backend.events()]
    assert events == [{"type": "server.connected", "properties": {}}]
    assert [path for path, _ in seen] == [
        "/session",
        "/session/status",
        "/session/ses_1/prompt_async",
        "/event",
    ]
    assert {auth for _, auth in seen} == {basic("me", "s3cret:x")}
    await backend.aclose()


def test_the_environment_as_opencode_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENCODE_SERVER_USERNAME", raising=False)
    monkeypatch.delenv("OPENCODE_SERVER_PASSWORD", raising=False)
    assert OpenCodeCredentials.from_env() is None
    assert OpenCodeBackend(URL).credentials is None
    monkeypatch.setenv("OPENCODE_SERVER_PASSWORD", "pw")
    assert OpenCodeCredentials.from_env() == OpenCodeCredentials("opencode", "pw")
    monkeypatch.setenv("OPENCODE_SERVER_USERNAME", "alice")
    assert OpenCodeBackend(URL).credentials == OpenCodeCredentials("alice", "pw")
    assert OpenCodeCredentials.from_env({"OPENCODE_SERVER_PASSWORD": ""}) is None


def test_the_password_never_shows() -> None:
    credentials = OpenCodeCredentials("alice", "hunter2-secret")
    assert repr(credentials) == "OpenCodeCredentials(username='alice')"
    assert "hunter2-secret" not in str(credentials)
    backend = OpenCodeBackend(URL, credentials=credentials)
    assert "hunter2-secret" not in repr(backend) + repr(vars(backend))


def test_a_password_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENCODE_SERVER_USERNAME", raising=False)
    path = tmp_path / "pw"
    path.write_text("  spaced pw \nignored\n")
    assert OpenCodeCredentials.from_file(path) == OpenCodeCredentials("opencode", "  spaced pw ")
    assert OpenCodeCredentials.from_file(path, "bob").username == "bob"
    for content, problem in (
        (b"", "holds no password"),
        (b"\n", "holds no password"),
        (b"\xff\xfe", "is not UTF-8"),
        (b"x" * (64 * 1024 + 1), "is over 65536 bytes"),
    ):
        path.write_bytes(content)
        with pytest.raises(ValueError) as raised:
            OpenCodeCredentials.from_file(path)
        assert str(raised.value) == f"the OpenCode password file {str(path)!r} {problem}"
    with pytest.raises(ValueError) as raised:
        OpenCodeCredentials.from_file(tmp_path / "missing")
    missing = str(tmp_path / "missing")
    assert str(raised.value) == (
        f"cannot read the OpenCode password file {missing!r}: No such file or directory"
    )


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refusal_is_a_setup_error_logged_once_until_a_call_succeeds(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    refuse = [True]

    def handler(request: httpx.Request) -> httpx.Response:
        if refuse[0]:
            return httpx.Response(status, text="Unauthorized")
        return httpx.Response(200, json={})

    backend = _backend(httpx.MockTransport(handler), OpenCodeCredentials("opencode", "nope"))
    caplog.set_level(logging.ERROR, logger="asyncagents.tasks.opencode")
    for _ in range(3):
        with pytest.raises(BackendAuthError) as raised:
            await backend.status()
    assert not isinstance(raised.value, BackendHTTPError)
    text = (
        f"OpenCode server at {URL} refused GET {URL}/session/status with HTTP {status}: it does "
        'not accept the username "opencode" and the password given. This is a setup problem '
        "that retrying will not fix: set OPENCODE_SERVER_PASSWORD (and OPENCODE_SERVER_USERNAME "
        'if it is not "opencode") to the credentials `opencode serve` runs with, in the '
        "environment of `asyncagents serve` (or give it --opencode-password-file), and restart "
        "it."
    )
    assert str(raised.value) == text
    assert "try again" not in text and "nope" not in text
    assert [r.getMessage() for r in caplog.records] == [text]
    refuse[0] = False
    await backend.status()
    refuse[0] = True
    with pytest.raises(BackendAuthError):
        await backend.status()
    assert [r.getMessage() for r in caplog.records] == [text, text]
    await backend.aclose()


async def test_the_event_stream_refused_is_the_same_error() -> None:
    backend = _backend(httpx.MockTransport(lambda r: httpx.Response(401)), None)
    with pytest.raises(BackendAuthError) as raised:
        async for _ in backend.events():
            pass
    assert str(raised.value).startswith(
        f"OpenCode server at {URL} refused GET {URL}/event with HTTP 401: it is protected by a "
        "password and none was given. "
    )
    await backend.aclose()


def test_serve_refuses_an_unusable_password_file(tmp_path: Path) -> None:
    env = {"PYTHONPATH": python_path(), "XDG_STATE_HOME": str(tmp_path / "state")}
    missing = tmp_path / "nope"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "asyncagents", "serve", "--opencode", "http://127.0.0.1:9"),
            *("--opencode-password-file", str(missing)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"asyncagents serve: cannot read the OpenCode password file {str(missing)!r}: "
        "No such file or directory\n"
    )
