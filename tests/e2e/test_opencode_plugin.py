"""End to end through OpenCode itself: the plugin installed by ``asyncagents opencode install``,
the service started by ``asyncagents serve``, the scripted fake model as the parent's model.

One real ``opencode serve`` runs in a temporary project (plugins enabled: no OPENCODE_PURE) for
this module; the service is a subprocess stopped by PID. Nothing here calls the manager
directly: every task is started by the model calling a plugin tool.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asyncagents.service import load_or_create_token
from asyncagents.tasks import TOOLS, OpenCodeBackend
from e2e_support import AGENT, free_port, opencode_binary, until
from fake_model import WAKE_TAG, FakeModel
from parent_notices import texts
from plugin_support import (
    PluginOpenCode,
    ServiceProcess,
    call,
    install_plugin_cli,
    new_parent,
    notices_of,
    say_to,
    started_task_id,
    tool_outputs,
)


@pytest.fixture(scope="module")
def service_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def plugin_root(tmp_path_factory: pytest.TempPathFactory, service_port: int) -> Path:
    """A project with the plugin installed by the command line, as a user would."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "project").mkdir()
    install_plugin_cli(root / "project", root / "state", f"http://127.0.0.1:{service_port}")
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
            got = params["properties"][name]
            if "anyOf" in spec:  # fork_turns: "all" or a whole number
                kinds = [option.get("type") for option in got.get("anyOf", [])]
                assert kinds == [o["type"] for o in spec["anyOf"]], (definition.name, name, got)
            else:
                assert got["type"] == spec["type"], (definition.name, name)
    assert offered["asyncagents_task"]["parameters"]["required"] == ["prompt"]
    assert offered["asyncagents_output"]["parameters"]["properties"]["timeout"]["maximum"] == 600


#: the last line of asyncagents_output
USAGE_LINE = re.compile(
    r"Usage: [\d,]+ tokens \(input [\d,]+, output [\d,]+, reasoning [\d,]+, cache read [\d,]+, "
    r"cache write [\d,]+\), \$\d+\.\d{2,4}\."
)


async def test_fork_task_wakes_the_parent_which_reads_and_answers_the_result(
    service: ServiceProcess, oc: OpenCodeBackend, fake_model: FakeModel
) -> None:
    parent = await new_parent(oc)
    await say_to(oc, parent, "The secret word is heliotrope. Remember it.")
    launch = call(
        "asyncagents_task",
        {
            "prompt": "[fake:context] what do you know?",
            "agent": AGENT,
            "description": "forked look",
            "fork": True,
        },
    )
    reply = await say_to(oc, parent, f"{WAKE_TAG} delegate this {launch}")
    (started,) = await tool_outputs(oc, parent, "asyncagents_task")
    task_id = started_task_id(started)
    assert started.startswith(f"Background task started: `{task_id}` (forked)\nAgent: build\n")
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
    (read,) = await tool_outputs(oc, parent, "asyncagents_output")
    text, usage = read.rsplit("\n", 1)
    assert (
        text == f"Task `{task_id}` (forked) [completed] build: forked look\n\nResult:\ncontext-seen"
    )
    assert USAGE_LINE.fullmatch(usage), usage  # the priced fake model's counts vary with paths
    assert [t for _, t in await notices_of(oc, parent)] == [task_id]
    # the parent's model was offered the plugin's tools, the child's was not (tools: false)
    child_prompt = "[fake:context] what do you know?"
    offered = [
        {t["function"]["name"] for t in r.get("tools") or ()}
        for r in list(fake_model.requests)
        if _last_user(r).startswith(child_prompt) or WAKE_TAG in _last_user(r)
    ]
    as_child = [names for names in offered if "bash" in names and "asyncagents_task" not in names]
    as_parent = [names for names in offered if "asyncagents_task" in names]
    assert as_child and as_parent, offered


def _last_user(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages") or () if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


async def test_list_cancel_and_clear_through_the_plugin(
    service: ServiceProcess, oc: OpenCodeBackend
) -> None:
    parent = await new_parent(oc)
    await say_to(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:slow] take your time", "agent": AGENT, "description": "slow one"},
        ),
    )
    (started,) = await tool_outputs(oc, parent, "asyncagents_task")
    task_id = started_task_id(started)
    await say_to(oc, parent, call("asyncagents_list", {}))
    assert (await tool_outputs(oc, parent, "asyncagents_list"))[-1] == (
        f"Background tasks (newest first):\n- `{task_id}` [running] build: slow one "
        "(0 tokens, $0.00)"
    )
    await say_to(oc, parent, call("asyncagents_list", {"status": "completed"}))
    assert (await tool_outputs(oc, parent, "asyncagents_list"))[-1] == "No background tasks found"
    await say_to(oc, parent, call("asyncagents_cancel", {"task_id": task_id}))
    assert (await tool_outputs(oc, parent, "asyncagents_cancel"))[-1] == (
        f"Cancelled background task `{task_id}`: slow one"
    )
    await say_to(oc, parent, call("asyncagents_output", {"task_id": task_id, "block": "false"}))
    text, usage = (await tool_outputs(oc, parent, "asyncagents_output"))[-1].rsplit("\n", 1)
    assert text == (
        f"Task `{task_id}` [cancelled] build: slow one\n\nThe task was cancelled: cancelled by the "
        "parent"
    )
    assert USAGE_LINE.fullmatch(usage), usage
    await say_to(
        oc, parent, call("asyncagents_output", {"task_id": task_id, "full_session": "TRUE"})
    )
    full = (await tool_outputs(oc, parent, "asyncagents_output"))[-1]
    head, conversation = full.split("\n\nConversation (", 1)
    assert head.startswith(f"Task `{task_id}` [cancelled] build: slow one")
    assert re.search(r"^\[msg_\w+\] user\n\[fake:slow\] take your time$", conversation, re.M)
    assert "[error] MessageAbortedError" in conversation
    await say_to(oc, parent, call("asyncagents_clear", {}))
    assert (await tool_outputs(oc, parent, "asyncagents_clear"))[-1] == (
        "Cleared 1 background task(s); 0 running one(s) aborted."
    )
    # bad arguments come back as the service's text, naming the field
    await say_to(oc, parent, call("asyncagents_output", {"task_id": task_id, "timeout": "soon"}))
    assert (await tool_outputs(oc, parent, "asyncagents_output"))[-1] == (
        'Error: invalid arguments for asyncagents_output:\n- timeout: must be a number (got "soon")'
    )


async def test_service_down_answers_a_clear_error_in_bounded_time(
    plugin_opencode: PluginOpenCode, oc: OpenCodeBackend, service_port: int, plugin_root: Path
) -> None:
    token_path = plugin_root / "state" / "asyncagents" / "token"
    kept = token_path.read_bytes() if token_path.exists() else None
    token_path.unlink(missing_ok=True)
    parent = await new_parent(oc)
    # never started: no token yet
    await say_to(oc, parent, call("asyncagents_list", {}))
    assert (await tool_outputs(oc, parent, "asyncagents_list"))[-1] == (
        f"Error: no service token at {token_path} (ENOENT). Start the service with "
        "`asyncagents serve --opencode <this OpenCode server's URL>`: it creates the token on "
        "its first start."
    )
    if kept is None:
        load_or_create_token(token_path)
    else:
        token_path.write_bytes(kept)
        token_path.chmod(0o600)
    # started once, down now
    begin = time.monotonic()
    await say_to(oc, parent, call("asyncagents_list", {}))
    assert time.monotonic() - begin < 60
    text = (await tool_outputs(oc, parent, "asyncagents_list"))[-1]
    assert text.startswith(
        f"Error: the asyncagents service at http://127.0.0.1:{service_port} is not reachable ("
    ), text
    assert text.endswith(
        "). Start it with `asyncagents serve --opencode <this OpenCode server's URL>`, then call "
        "the tool again."
    )


async def test_service_slow_answers_a_timeout_text(
    plugin_opencode: PluginOpenCode, oc: OpenCodeBackend, service_port: int
) -> None:
    # something holds the service's port, accepts connections and never answers
    with socket.socket() as hole:
        hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hole.bind(("127.0.0.1", service_port))
        hole.listen(16)
        parent = await new_parent(oc)
        begin = time.monotonic()
        await say_to(oc, parent, call("asyncagents_list", {}))
        elapsed = time.monotonic() - begin
    (text,) = await tool_outputs(oc, parent, "asyncagents_list")
    assert text == (
        f"Error: the asyncagents service at http://127.0.0.1:{service_port} did not answer within "
        "30 s. Check that `asyncagents serve` is running, then call the tool again (a task you "
        "started may exist already: see asyncagents_list)."
    )
    assert 30 <= elapsed < 90


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_service_restarted_while_a_child_runs_notices_once(
    service: ServiceProcess, oc: OpenCodeBackend, how: str
) -> None:
    parent = await new_parent(oc)
    await say_to(
        oc,
        parent,
        call(
            "asyncagents_task",
            {"prompt": "[fake:delay=6] finish later", "agent": AGENT, "description": how},
        ),
    )
    (started,) = await tool_outputs(oc, parent, "asyncagents_task")
    task_id = started_task_id(started)
    status = service.stop(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    if how == "sigterm":
        assert status == 0, service.log_tail()
    await asyncio.sleep(1)
    service.start()

    async def noticed() -> bool:
        return any(t == task_id for _, t in await notices_of(oc, parent))

    await until(noticed, timeout=120, what="the child's notice after the restart")
    await asyncio.sleep(5)  # a second delivery would have come by now
    assert [t for _, t in await notices_of(oc, parent)] == [task_id]


async def test_ten_parents_with_five_tasks_each(
    service: ServiceProcess, oc: OpenCodeBackend
) -> None:
    parents = [await new_parent(oc) for _ in range(10)]

    async def delegate(index: int, parent: str) -> None:
        tags = " ".join(
            call(
                "asyncagents_task",
                {"prompt": f"job {index}.{n}", "agent": AGENT, "description": f"job {n}"},
            )
            for n in range(5)
        )
        await say_to(oc, parent, tags)

    await asyncio.gather(*(delegate(i, p) for i, p in enumerate(parents)))
    started: dict[str, set[str]] = {}
    for parent in parents:
        outputs = await tool_outputs(oc, parent, "asyncagents_task")
        assert len(outputs) == 5, outputs
        started[parent] = {started_task_id(o) for o in outputs}
        assert len(started[parent]) == 5

    async def all_noticed() -> bool:
        for parent in parents:
            if len(await notices_of(oc, parent)) < 5:
                return False
        return True

    await until(all_noticed, timeout=240, what="50 notices")
    await asyncio.sleep(3)
    for parent in parents:
        notices = await notices_of(oc, parent)
        assert sorted(t for _, t in notices) == sorted(started[parent])
        assert len({n for n, _ in notices}) == 5
