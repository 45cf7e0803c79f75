"""Support of the plugin end-to-end tests and benchmarks: OpenCode with the plugin installed by
``asyncagents opencode install``, ``asyncagents serve`` as a subprocess, and readers of what a
parent session saw (tool outputs, notices)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from asyncagents.tasks import OpenCodeBackend, PromptRequest
from e2e_support import AGENT, OpenCodeServer, free_port, until
from fake_model import CALL_TAG
from parent_notices import texts
from subprocess_env import python_path

REPO = Path(__file__).resolve().parents[2]
OPENCODE_VERSION = "1.18.33"
NOTICE = re.compile(r"\[asyncagents notice (ntc_[0-9a-f]+)\]\nBackground task `(tsk_[0-9a-f]+)`")


def call(tool: str, arguments: dict[str, Any]) -> str:
    """The fake model's tag that makes it call `tool` with `arguments`."""
    return f"{CALL_TAG}{tool} {json.dumps(arguments)}]"


class PluginOpenCode(OpenCodeServer):
    """``opencode serve`` in a project with the plugin installed; plugins enabled."""

    def __init__(self, binary: str, model_url: str, root: Path, state: Path) -> None:
        super().__init__(binary, model_url, root)
        self.state = state

    def env(self) -> dict[str, str]:
        env = super().env()
        env.pop("OPENCODE_PURE", None)  # it disables the project's plugins
        env["XDG_STATE_HOME"] = str(self.state)
        return env


class ServiceProcess:
    """``asyncagents serve`` as a subprocess over one OpenCode server."""

    def __init__(
        self,
        root: Path,
        opencode_url: str,
        state: Path,
        *,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = root
        self.opencode_url = opencode_url
        self.state = state
        self.log_path = root / "service.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: more environment variables, and more arguments of ``asyncagents serve``
        self.extra_env = dict(env or {})
        self.extra_args = args

    def start(self) -> ServiceProcess:
        env = {**os.environ, "PYTHONPATH": python_path(), "XDG_STATE_HOME": str(self.state)}
        env.pop("ASYNCAGENTS_TOKEN_FILE", None)
        env.update(self.extra_env)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "asyncagents",
                    "serve",
                    "--opencode",
                    self.opencode_url,
                    "--port",
                    str(self.port),
                    "--store",
                    str(self.root / "tasks.sqlite3"),
                    "--wake",
                    "each",
                    *self.extra_args,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.process.poll() is not None:
                pytest.fail(f"asyncagents serve exited: {self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        pytest.fail(f"asyncagents serve not healthy after 60 s: {self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return process.returncode if process else 0
        process.send_signal(sig)
        try:
            return process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
            pytest.fail(f"asyncagents serve did not stop on signal {sig}: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"


def install_plugin_cli(project: Path, state: Path, service_url: str) -> None:
    """``asyncagents opencode install`` as a user runs it (real npm, pinned package)."""
    env = {**os.environ, "PYTHONPATH": python_path(), "XDG_STATE_HOME": str(state)}
    env.pop("ASYNCAGENTS_TOKEN_FILE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncagents",
            "opencode",
            "install",
            str(project),
            "--opencode-version",
            OPENCODE_VERSION,
            "--service",
            service_url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def new_parent(oc: OpenCodeBackend) -> str:
    return str((await oc.create_session(title="plugin parent"))["id"])


async def say_to(oc: OpenCodeBackend, session_id: str, text: str) -> dict[str, Any]:
    return await oc.prompt(session_id, PromptRequest(text=text, agent=AGENT))


def tool_parts(messages: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [
        p
        for m in messages
        for p in m.get("parts") or ()
        if p.get("type") == "tool" and p.get("tool") == tool
    ]


async def tool_outputs(oc: OpenCodeBackend, session_id: str, tool: str) -> list[str]:
    """The outputs of every finished call of `tool` in the session, oldest first."""
    parts = tool_parts(await oc.messages(session_id), tool)
    return [
        str(p["state"].get("output") if p["state"]["status"] == "completed" else p["state"])
        for p in parts
        if p["state"]["status"] in ("completed", "error")
    ]


async def next_tool_output(oc: OpenCodeBackend, session_id: str, tool: str, seen: int) -> str:
    """The output of the call of `tool` after the first `seen`, once it has finished. A prompt
    sent while a notice's turn runs in the session can return with that turn, before its own
    call shows, so the last output at that moment may still be an older call's."""
    found: list[str] = []

    async def more() -> bool:
        found[:] = await tool_outputs(oc, session_id, tool)
        return len(found) > seen

    await until(more, 60, f"call {seen + 1} of {tool} to finish")
    return found[seen]


async def notices_of(oc: OpenCodeBackend, session_id: str) -> list[tuple[str, str]]:
    """(notice id, task id) of every notice the parent received, in order."""
    found: list[tuple[str, str]] = []
    for message in await oc.messages(session_id):
        if message["info"]["role"] != "user":
            continue
        for text in texts(message):
            found.extend(NOTICE.findall(text))
    return found


def started_task_id(started: str) -> str:
    # started at once, or queued behind the caps (docs/limits.md)
    match = re.match(r"Background task (?:started|queued): `(tsk_[0-9a-f]+)`", started)
    assert match, started
    return match.group(1)
