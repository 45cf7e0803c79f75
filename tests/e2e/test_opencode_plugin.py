"""End to end through OpenCode itself: the plugin installed by ``asyncagents opencode install``,
the service started by ``asyncagents serve``, the scripted fake model as the parent's model.

One real ``opencode serve`` runs in a temporary project (plugins enabled: no OPENCODE_PURE) for
this module; the service is a subprocess stopped by PID. Nothing here calls the manager
directly: every task is started by the model calling a plugin tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asyncagents import tasks
from asyncagents.tasks import TOOLS, OpenCodeBackend, PromptRequest
from e2e_support import AGENT, OpenCodeServer, free_port, opencode_binary, until
from fake_model import CALL_TAG, WAKE_TAG, FakeModel
from parent_notices import texts

REPO = Path(__file__).resolve().parents[2]
OPENCODE_VERSION = "1.18.33"
NOTICE = re.compile(r"\[asyncagents notice (ntc_[0-9a-f]+)\]\nBackground task (tsk_[0-9a-f]+)")
#: the manager wakes parents (a prompt their model answers) only once it has wake modes
HAS_WAKE = hasattr(tasks, "TaskManagerConfig")


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

    def __init__(self, root: Path, opencode_url: str, state: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = root
        self.opencode_url = opencode_url
        self.state = state
        self.log_path = root / "service.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "XDG_STATE_HOME": str(self.state)}
        env.pop("ASYNCAGENTS_TOKEN_FILE", None)
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


@pytest.fixture(scope="module")
def service_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def plugin_root(tmp_path_factory: pytest.TempPathFactory, service_port: int) -> Path:
    """A project with the plugin installed by the command line, as a user would."""
    root = tmp_path_factory.mktemp("plugin")
    project = root / "project"
    project.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "XDG_STATE_HOME": str(root / "state")}
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
            f"http://127.0.0.1:{service_port}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture(scope="module")
def plugin_opencode(fake_model: FakeModel, plugin_root: Path) -> Iterator[PluginOpenCode]:
    project = plugin_root / "project"
    lock = (project / ".opencode" / "package-lock.json").read_bytes()
    server = PluginOpenCode(
        opencode_binary(), fake_model.base_url, plugin_root, plugin_root / "state"
    )
    server.project = project
    try:
        server.start()
        yield server
    finally:
        server.stop()
    # OpenCode downloaded and changed nothing in .opencode/
    assert (project / ".opencode" / "package-lock.json").read_bytes() == lock


@pytest.fixture
def service(
    plugin_opencode: PluginOpenCode, plugin_root: Path, service_port: int
) -> Iterator[ServiceProcess]:
    svc = ServiceProcess(plugin_root, plugin_opencode.base_url, plugin_root / "state")
    svc.port = service_port
    svc.url = f"http://127.0.0.1:{service_port}"
    svc.start()
    try:
        yield svc
    finally:
        svc.stop(signal.SIGKILL)


@pytest.fixture
async def oc(plugin_opencode: PluginOpenCode) -> AsyncIterator[OpenCodeBackend]:
    async with OpenCodeBackend(plugin_opencode.base_url) as client:
        yield client


async def _parent(oc: OpenCodeBackend) -> str:
    return str((await oc.create_session(title="plugin parent"))["id"])


async def _say(oc: OpenCodeBackend, session_id: str, text: str) -> dict[str, Any]:
    return await oc.prompt(session_id, PromptRequest(text=text, agent=AGENT))


def _tool_parts(messages: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [
        p
        for m in messages
        for p in m.get("parts") or ()
        if p.get("type") == "tool" and p.get("tool") == tool
    ]


async def _outputs(oc: OpenCodeBackend, session_id: str, tool: str) -> list[str]:
    """The outputs of every finished call of `tool` in the session, oldest first."""
    parts = _tool_parts(await oc.messages(session_id), tool)
    return [
        str(p["state"].get("output") if p["state"]["status"] == "completed" else p["state"])
        for p in parts
        if p["state"]["status"] in ("completed", "error")
    ]


async def _notices(oc: OpenCodeBackend, session_id: str) -> list[tuple[str, str]]:
    """(notice id, task id) of every notice the parent received, in order."""
    found: list[tuple[str, str]] = []
    for message in await oc.messages(session_id):
        if message["info"]["role"] != "user":
            continue
        for text in texts(message):
            found.extend(NOTICE.findall(text))
    return found


def _task_id(started: str) -> str:
    match = re.match(r"Background task started: (tsk_[0-9a-f]+)", started)
    assert match, started
    return match.group(1)


# --- the tests ---------------------------------------------------------------------------------


async def test_opencode_offers_the_five_tools_with_types_and_optionality(
    plugin_opencode: PluginOpenCode,
) -> None:
    async with httpx.AsyncClient(base_url=plugin_opencode.base_url, timeout=60) as http:
        response = await http.get(
            "/experimental/tool",
            params={
                "provider": "fake",
                "model": "fake-model",
                "directory": str(plugin_opencode.project),
            },
        )
    assert response.status_code == 200, response.text
    offered = {t["id"]: t for t in response.json() if t["id"].startswith("asyncagents_")}
    assert list(offered) == [t.name for t in TOOLS]
    for definition in TOOLS:
        seen = offered[definition.name]
        assert seen["description"] == definition.description
        params = seen["parameters"]
        assert list(params["properties"]) == list(definition.parameters["properties"])
        assert params.get("required", []) == definition.parameters.get("required", [])
        for name, spec in definition.parameters["properties"].items():
            assert params["properties"][name]["type"] == spec["type"], (definition.name, name)
    assert offered["asyncagents_task"]["parameters"]["required"] == ["prompt"]
    assert offered["asyncagents_output"]["parameters"]["properties"]["timeout"]["maximum"] == 600


@pytest.mark.xfail(
    not HAS_WAKE, reason="the manager wakes parents only from branch `manager`", strict=True
)
async def test_fork_task_wakes_the_parent_which_reads_and_answers_the_result(
    service: ServiceProcess, oc: OpenCodeBackend
) -> None:
    parent = await _parent(oc)
    await _say(oc, parent, "The secret word is heliotrope. Remember it.")
    launch = call(
        "asyncagents_task",
        {
            "prompt": "[fake:context] what do you know?",
            "agent": AGENT,
            "description": "forked look",
            "fork": True,
        },
    )
    reply = await _say(oc, parent, f"{WAKE_TAG} delegate this {launch}")
    (started,) = await _outputs(oc, parent, "asyncagents_task")
    task_id = _task_id(started)
    assert started.startswith(f"Background task started: {task_id} (forked)\nAgent: build\n")
    assert any(
        p.get("text", "").startswith("Tool results:\nBackground task started: ")
        for p in reply["parts"]
    )

    # the parent's turn ended; the child's notice wakes it, it reads the output and answers
    async def answered() -> bool:
        messages = await oc.messages(parent)
        last = messages[-1]
        return (
            last["info"]["role"] == "assistant"
            and any(t == "Child result: context-seen" for t in texts(last))
            and last["info"].get("time", {}).get("completed") is not None
        )

    await until(answered, timeout=120, what="the woken parent's answer")
    (read,) = await _outputs(oc, parent, "asyncagents_output")
    assert (
        read == f"Task {task_id} (forked) [completed] build: forked look\n\nResult:\ncontext-seen"
    )
    assert [t for _, t in await _notices(oc, parent)] == [task_id]


async def test_list_cancel_and_clear_through_the_plugin(
    service: ServiceProcess, oc: OpenCodeBackend
) -> None:
    parent = await _parent(oc)
    await _say(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:slow] take your time", "agent": AGENT, "description": "slow one"},
        ),
    )
    (started,) = await _outputs(oc, parent, "asyncagents_task")
    task_id = _task_id(started)
    await _say(oc, parent, call("asyncagents_list", {}))
    assert (await _outputs(oc, parent, "asyncagents_list"))[-1] == (
        f"Background tasks (newest first):\n- {task_id} [running] build: slow one"
    )
    await _say(oc, parent, call("asyncagents_list", {"status": "completed"}))
    assert (await _outputs(oc, parent, "asyncagents_list"))[-1] == "No background tasks found"
    await _say(oc, parent, call("asyncagents_cancel", {"task_id": task_id}))
    assert (await _outputs(oc, parent, "asyncagents_cancel"))[-1] == (
        f"Cancelled background task {task_id}: slow one"
    )
    await _say(oc, parent, call("asyncagents_output", {"task_id": task_id, "block": "false"}))
    assert (await _outputs(oc, parent, "asyncagents_output"))[-1] == (
        f"Task {task_id} [cancelled] build: slow one\n\nThe task was cancelled: cancelled by the "
        "parent"
    )
    await _say(oc, parent, call("asyncagents_clear", {}))
    assert (await _outputs(oc, parent, "asyncagents_clear"))[-1] == (
        "Cleared 1 background task(s); 0 running one(s) aborted."
    )
    # bad arguments come back as the service's text, naming the field
    await _say(oc, parent, call("asyncagents_output", {"task_id": task_id, "timeout": "soon"}))
    assert (await _outputs(oc, parent, "asyncagents_output"))[-1] == (
        'Error: invalid arguments for asyncagents_output:\n- timeout: must be a number (got "soon")'
    )


async def test_service_down_answers_a_clear_error_in_bounded_time(
    plugin_opencode: PluginOpenCode, oc: OpenCodeBackend, service_port: int
) -> None:
    parent = await _parent(oc)
    begin = time.monotonic()
    await _say(oc, parent, call("asyncagents_list", {}))
    assert time.monotonic() - begin < 60
    (text,) = await _outputs(oc, parent, "asyncagents_list")
    assert text.startswith(
        f"Error: the asyncagents service at http://127.0.0.1:{service_port} is not reachable ("
    ), text
    assert text.endswith(
        "). Start it with `asyncagents serve --opencode <this OpenCode server's URL>`, then call "
        "the tool again."
    )


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_service_restarted_while_a_child_runs_notices_once(
    service: ServiceProcess, oc: OpenCodeBackend, how: str
) -> None:
    parent = await _parent(oc)
    await _say(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:delay=6] finish later", "agent": AGENT, "description": how},
        ),
    )
    (started,) = await _outputs(oc, parent, "asyncagents_task")
    task_id = _task_id(started)
    status = service.stop(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    if how == "sigterm":
        assert status == 0, service.log_tail()
    await asyncio.sleep(1)
    service.start()

    async def noticed() -> bool:
        return any(t == task_id for _, t in await _notices(oc, parent))

    await until(noticed, timeout=120, what="the child's notice after the restart")
    await asyncio.sleep(5)  # a second delivery would have come by now
    assert [t for _, t in await _notices(oc, parent)] == [task_id]


async def test_ten_parents_with_five_tasks_each(
    service: ServiceProcess, oc: OpenCodeBackend
) -> None:
    parents = [await _parent(oc) for _ in range(10)]

    async def delegate(index: int, parent: str) -> None:
        tags = " ".join(
            call(
                "asyncagents_task",
                {"prompt": f"job {index}.{n}", "agent": AGENT, "description": f"job {n}"},
            )
            for n in range(5)
        )
        await _say(oc, parent, tags)

    await asyncio.gather(*(delegate(i, p) for i, p in enumerate(parents)))
    started: dict[str, set[str]] = {}
    for parent in parents:
        outputs = await _outputs(oc, parent, "asyncagents_task")
        assert len(outputs) == 5, outputs
        started[parent] = {_task_id(o) for o in outputs}
        assert len(started[parent]) == 5

    async def all_noticed() -> bool:
        for parent in parents:
            if len(await _notices(oc, parent)) < 5:
                return False
        return True

    await until(all_noticed, timeout=240, what="50 notices")
    await asyncio.sleep(3)
    for parent in parents:
        notices = await _notices(oc, parent)
        assert sorted(t for _, t in notices) == sorted(started[parent])
        assert len({n for n, _ in notices}) == 5
