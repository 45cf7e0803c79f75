"""`run_tool` answers every input with a text: one test per failure kind, then hypothesis."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncagents.tasks import (
    BackendError,
    BackendUnavailableError,
    InMemoryTaskStore,
    InProcessBackend,
    SQLiteTaskStore,
    StoreError,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    run_tool,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_support import Responder

QUICK = TaskManagerConfig(poll_interval=0.2, wake="never")
OUTPUT = "asyncagents_output"
TASK = "asyncagents_task"


def _bad(tool: str, *lines: str) -> str:
    return "\n".join([f"Error: invalid arguments for {tool}:", *lines])


async def test_timeout_of_the_wrong_kind(manager: TaskManager, parent: str) -> None:
    cases = {
        "abc": '- timeout: must be a number (got "abc")',
        "[1]": "- timeout: must be a number (got [1])",
        "nan": "- timeout: must be a finite number (got NaN)",
        "-1": "- timeout: must be between 0 and 600 seconds (got -1)",
        "true": "- timeout: must be a number (got true)",
    }
    for raw, line in cases.items():
        value: Any = json.loads(raw) if raw in ("[1]", "-1", "true") else raw
        if raw == "nan":
            value = math.nan
        text = await run_tool(manager, parent, OUTPUT, {"task_id": "tsk_x", "timeout": value})
        assert text == _bad(OUTPUT, line), raw
    huge = await run_tool(manager, parent, OUTPUT, {"task_id": "tsk_x", "timeout": 10**400})
    assert huge == _bad(OUTPUT, f"- timeout: must be a finite number (got {'1' + '0' * 56}...)")
    for value in ("Infinity", math.inf, "-inf"):
        text = await run_tool(manager, parent, OUTPUT, {"task_id": "tsk_x", "timeout": value})
        assert text.startswith(_bad(OUTPUT, "- timeout: must be a finite number (got ")), value


async def test_timeout_none_and_numeric_strings_are_read(manager: TaskManager, parent: str) -> None:
    task = await manager.task(parent, "[hold] x", agent="build", description="held")
    for value in (None, "0.2", 0, "0"):
        text = await run_tool(
            manager, parent, OUTPUT, {"task_id": task.id, "timeout": value, "block": False}
        )
        assert text.startswith(f"Task `{task.id}` [running] build: held\n"), value
    text = await run_tool(
        manager, parent, OUTPUT, {"task_id": task.id, "timeout": " 0.2 ", "block": "TRUE"}
    )
    assert text.startswith("Still running after waiting 0s.\n")


async def test_arguments_as_a_json_string(manager: TaskManager, parent: str) -> None:
    text = await run_tool(
        manager,
        parent,
        TASK,
        json.dumps({"prompt": "[hold] hi", "agent": "build", "description": "d"}),
    )
    assert text.startswith("Background task started: ")
    (task,) = await manager.list(parent)
    assert await run_tool(manager, parent, "asyncagents_list", "") == (
        f"Background tasks (newest first):\n- `{task.id}` [{task.status.value}] build: d "
        "(0 tokens, $0.00)"
    )
    assert await run_tool(manager, parent, TASK, "[1, 2]") == (
        "Error: the arguments of asyncagents_task must be a JSON object of named arguments, "
        "not a list."
    )
    text = await run_tool(manager, parent, TASK, "{prompt")
    assert text.startswith("Error: the arguments of asyncagents_task are not valid JSON (")
    assert await run_tool(manager, parent, TASK, '"text"') == (
        "Error: the arguments of asyncagents_task must be a JSON object of named arguments, "
        "not str."
    )


async def test_arguments_none_or_a_list(manager: TaskManager, parent: str) -> None:
    assert await run_tool(manager, parent, TASK, None) == _bad(TASK, "- prompt: required")
    assert await run_tool(manager, parent, "asyncagents_clear", None) == (
        "No background tasks found"
    )
    assert await run_tool(manager, parent, TASK, [{"prompt": "x"}]) == (
        "Error: the arguments of asyncagents_task must be a JSON object of named arguments, "
        "not a list."
    )
    assert await run_tool(manager, parent, TASK, 5) == (
        "Error: the arguments of asyncagents_task must be a JSON object of named arguments, "
        "not int."
    )
    assert await run_tool(manager, parent, TASK, {1: "x"}) == (
        "Error: the argument names of asyncagents_task must be strings."
    )


async def test_lone_surrogate_in_prompt_with_sqlite(tmp_path: Path) -> None:
    backend = InProcessBackend(Responder())
    store = SQLiteTaskStore(tmp_path / "tasks.sqlite3")
    async with TaskManager(backend, store, QUICK) as manager:
        parent = str((await backend.create_session(title="p"))["id"])
        text = await run_tool(
            manager, parent, TASK, {"prompt": "bad \ud800 text", "agent": "build"}
        )
        assert text == _bad(
            TASK,
            "- prompt: must be valid Unicode text (it holds a lone surrogate) "
            '(got "bad \\ud800 text")',
        )
        assert await manager.list(parent) == []
        # a proper pair (an emoji) is fine
        text = await run_tool(manager, parent, TASK, {"prompt": "ok \U0001f600", "agent": "b"})
        assert text.startswith("Background task started: ")


class _EmptySessionBackend(InProcessBackend):
    """A server answering ``POST /session`` with ``200 {}``."""

    async def create_session(self, **kwargs: Any) -> dict[str, Any]:
        return {}


async def test_server_answering_create_session_with_an_empty_object() -> None:
    """The session is created after `task()` returned: the task ends in error, saying why."""
    backend = _EmptySessionBackend(Responder())
    parent = str((await InProcessBackend.create_session(backend, title="p"))["id"])
    async with TaskManager(backend, InMemoryTaskStore(), QUICK) as manager:
        text = await run_tool(manager, parent, TASK, {"prompt": "x", "agent": "build"})
        (task,) = await manager.list(parent)
        assert text.startswith(f"Background task started: `{task.id}`\n"), text
        ended = (await manager.output(task.id, block=True, timeout=5)).task
    assert ended.status.value == "error" and ended.session_id is None
    assert ended.error == (
        "creating the child session failed: the session server's answer to creating a session "
        "has no session id: {}"
    )


class _DownBackend(InProcessBackend):
    async def create_session(self, **kwargs: Any) -> dict[str, Any]:
        raise BackendUnavailableError("OpenCode server at http://127.0.0.1:1 is unreachable")


async def test_backend_down_is_a_text() -> None:
    backend = _DownBackend(Responder())
    parent = str((await InProcessBackend.create_session(backend, title="p"))["id"])
    async with TaskManager(backend, InMemoryTaskStore(), QUICK) as manager:
        # task() does not wait for the server: the task is accepted, then ends in error
        first = await run_tool(manager, parent, TASK, {"prompt": "x", "agent": "build"})
        (task,) = await manager.list(parent)
        assert first.startswith(f"Background task started: `{task.id}`\n"), first
        ended = (await manager.output(task.id, block=True, timeout=5)).task
        assert ended.status.value == "error"
        assert ended.error == (
            "creating the child session failed: OpenCode server at http://127.0.0.1:1 is "
            "unreachable"
        )
        # the server is known down now: the next call fails at once, storing nothing
        text = await run_tool(manager, parent, TASK, {"prompt": "x", "agent": "build"})
        assert [t.id for t in await manager.list(parent)] == [task.id]
    assert text == "Error: OpenCode server at http://127.0.0.1:1 is unreachable"


class _BrokenStore(InMemoryTaskStore):
    broken = False

    def list_tasks(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise OSError("disk I/O error")
        return super().list_tasks(*args, **kwargs)


async def test_store_failure_is_a_text(backend: InProcessBackend) -> None:
    store = _BrokenStore()
    async with TaskManager(backend, store, QUICK) as manager:
        store.broken = True
        text = await run_tool(manager, "ses_p", "asyncagents_list", {})
    assert text == (
        "Error: asyncagents_list failed unexpectedly (OSError: disk I/O error). "
        "Call asyncagents_list to see whether it took effect before trying again."
    )


async def test_fork_false_as_a_string_is_not_a_fork(manager: TaskManager, parent: str) -> None:
    for value, forked in (("false", False), ("FALSE", False), ("True", True), (None, False)):
        await run_tool(manager, parent, TASK, {"prompt": "x", "agent": "build", "fork": value})
        assert (await manager.list(parent))[0].is_forked is forked, value


async def test_block_false_as_a_string_does_not_block(manager: TaskManager, parent: str) -> None:
    task = await manager.task(parent, "[hold] x", agent="build", description="held")
    loop = asyncio.get_running_loop()
    begin = loop.time()
    text = await run_tool(manager, parent, OUTPUT, {"task_id": task.id, "block": "false"})
    assert loop.time() - begin < 5
    assert text.startswith(f"Task `{task.id}` [running]")
    assert "Still running after waiting" not in text


async def test_a_broken_session_id_is_a_text(manager: TaskManager) -> None:
    for session in ("", "ses_\udc80"):
        text = await run_tool(manager, session, "asyncagents_list", {})
        assert text == "Error: the calling session's id must be non-empty Unicode text."


async def test_extra_keys_are_refused(manager: TaskManager, parent: str) -> None:
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": "t", "force": 1})
    assert text == _bad(
        "asyncagents_cancel",
        "- force: not an argument of asyncagents_cancel (its arguments: task_id)",
    )


async def test_an_interrupted_blocking_output_answers_the_status_at_once(
    manager: TaskManager, parent: str
) -> None:
    task = await manager.task(parent, "[hold] x", agent="build", description="held")
    stop = asyncio.Event()
    call = asyncio.ensure_future(
        run_tool(manager, parent, OUTPUT, {"task_id": task.id, "block": True}, interrupt=stop)
    )
    await asyncio.sleep(0.2)
    assert not call.done()
    stop.set()
    text = await asyncio.wait_for(call, 5)
    assert text.startswith(f"Task `{task.id}` [running] build: held\n")
    current = await manager.output(task.id)
    assert current.task.status is TaskStatus.RUNNING


# --- hypothesis: any JSON, any string ---------------------------------------------------------

#: any text, with lone surrogates often (JSON's "\ud800" escapes decode to them)
_strings = st.text(
    alphabet=st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    max_size=30,
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _strings,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_strings, inner, max_size=4),
    max_leaves=12,
)
_fields = st.sampled_from(
    [
        "prompt",
        "agent",
        "description",
        "fork",
        "resume",
        "task_id",
        "block",
        "timeout",
        "full_session",
        "since_message_id",
        "message_limit",
        "status",
    ]
)
_arguments = st.one_of(
    _json,
    st.dictionaries(_fields, _json, max_size=6),
    _strings,
    st.dictionaries(_fields, _strings, max_size=6),
)
_names = st.sampled_from(
    [
        "asyncagents_task",
        "asyncagents_output",
        "asyncagents_list",
        "asyncagents_cancel",
        "asyncagents_clear",
    ]
) | st.text(max_size=20)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=_names, arguments=_arguments, session=_strings)
def test_run_tool_always_answers_a_text(
    tmp_path: Path, name: str, arguments: Any, session: str
) -> None:
    loop = asyncio.new_event_loop()
    try:
        text = loop.run_until_complete(_call(tmp_path, name, arguments, session))
    finally:
        loop.close()
    assert isinstance(text, str) and text
    text.encode("utf-8")  # valid Unicode: it can go into a JSON answer


async def _call(tmp_path: Path, name: str, arguments: Any, session: str) -> str:
    backend = InProcessBackend(Responder())
    store = SQLiteTaskStore(tmp_path / "h.sqlite3")
    async with TaskManager(backend, store, QUICK) as manager:
        if isinstance(arguments, dict) and "block" in arguments:
            arguments = {**arguments, "timeout": 0}
        text = await run_tool(manager, session, name, arguments)
    await store.close()
    return text


# --- hypothesis: whatever the backend and the store do -----------------------------------------

_FAILURES: list[Callable[[], BaseException]] = [
    lambda: StoreError("tasks.sqlite3: disk I/O error"),
    lambda: BackendError("HTTP 500 from OpenCode", 500),
    lambda: BackendUnavailableError("OpenCode at http://127.0.0.1:1 is unreachable"),
    lambda: RuntimeError("boom"),
    lambda: KeyError("id"),
    lambda: OSError("disk full"),
    lambda: ValueError("\ud800 bad"),
]
_STORE_CALLS = ["insert", "get", "ids_with_prefix", "update", "list_tasks", "delete_parent"]
_BACKEND_CALLS = ["create_session", "get_session", "messages", "abort", "prompt_async", "status"]


class _FaultyStore(InMemoryTaskStore):
    """Fails the calls named in `failing` with `error()` once `armed`."""

    def __init__(self, failing: set[str], error: Callable[[], BaseException]) -> None:
        super().__init__()
        self.failing, self.error, self.armed = failing, error, False

    def _check(self, name: str) -> None:
        if self.armed and name in self.failing:
            raise self.error()

    async def insert(self, task: Any) -> None:
        self._check("insert")
        await super().insert(task)

    async def get(self, task_id: str) -> Any:
        self._check("get")
        return await super().get(task_id)

    async def ids_with_prefix(self, *args: Any, **kwargs: Any) -> Any:
        self._check("ids_with_prefix")
        return await super().ids_with_prefix(*args, **kwargs)

    async def update(self, *args: Any, **kwargs: Any) -> Any:
        self._check("update")
        return await super().update(*args, **kwargs)

    async def list_tasks(self, *args: Any, **kwargs: Any) -> Any:
        self._check("list_tasks")
        return await super().list_tasks(*args, **kwargs)

    async def delete_parent(self, *args: Any, **kwargs: Any) -> Any:
        self._check("delete_parent")
        return await super().delete_parent(*args, **kwargs)


class _FaultyBackend(InProcessBackend):
    """Fails the calls named in `failing` with `error()` once `armed`."""

    def __init__(self, failing: set[str], error: Callable[[], BaseException]) -> None:
        super().__init__(Responder())
        self.failing, self.error, self.armed = failing, error, False

    def _check(self, name: str) -> None:
        if self.armed and name in self.failing:
            raise self.error()

    async def create_session(self, **kwargs: Any) -> dict[str, Any]:
        self._check("create_session")
        return await super().create_session(**kwargs)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        self._check("get_session")
        return await super().get_session(session_id)

    async def messages(self, session_id: str, *, limit: int | None = None) -> Any:
        self._check("messages")
        return await super().messages(session_id, limit=limit)

    async def abort(self, session_id: str) -> bool:
        self._check("abort")
        return await super().abort(session_id)

    async def prompt_async(self, session_id: str, request: Any) -> None:
        self._check("prompt_async")
        await super().prompt_async(session_id, request)

    async def status(self) -> Any:
        self._check("status")
        return await super().status()


_CALLS = st.sampled_from(
    [
        ("asyncagents_task", {"prompt": "[hold] go", "agent": "build"}),
        ("asyncagents_task", {"prompt": "go", "agent": "build", "fork": True}),
        ("asyncagents_task", {"prompt": "more", "resume": "@done"}),
        ("asyncagents_output", {"task_id": "@done", "full_session": True}),
        ("asyncagents_output", {"task_id": "@held", "block": True, "timeout": 0.05}),
        ("asyncagents_output", {"task_id": "@done", "message_limit": 1}),
        ("asyncagents_list", {}),
        ("asyncagents_cancel", {"task_id": "@held"}),
        ("asyncagents_clear", {}),
    ]
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    call=_CALLS,
    store_failing=st.sets(st.sampled_from(_STORE_CALLS)),
    backend_failing=st.sets(st.sampled_from(_BACKEND_CALLS)),
    error=st.sampled_from(_FAILURES),
)
def test_run_tool_answers_a_text_whatever_fails(
    call: tuple[str, dict[str, Any]],
    store_failing: set[str],
    backend_failing: set[str],
    error: Callable[[], BaseException],
) -> None:
    loop = asyncio.new_event_loop()
    try:
        text = loop.run_until_complete(_faulty_call(call, store_failing, backend_failing, error))
    finally:
        loop.close()
    assert isinstance(text, str) and text
    text.encode("utf-8")


async def _faulty_call(
    call: tuple[str, dict[str, Any]],
    store_failing: set[str],
    backend_failing: set[str],
    error: Callable[[], BaseException],
) -> str:
    backend = _FaultyBackend(backend_failing, error)
    store = _FaultyStore(store_failing, error)
    manager = TaskManager(backend, store, QUICK)
    try:
        await manager.start()
        parent = str((await backend.create_session(title="p"))["id"])
        done = await manager.task(parent, "finished", agent="build", description="done")
        await manager.output(done.id, block=True, timeout=5)
        held = await manager.task(parent, "[hold] held", agent="build", description="held")
        ids = {"@done": done.id, "@held": held.id}
        name, arguments = call
        arguments = {k: ids.get(v, v) if isinstance(v, str) else v for k, v in arguments.items()}
        backend.armed = store.armed = True
        return await asyncio.wait_for(run_tool(manager, parent, name, arguments), 30)
    finally:
        backend.armed = store.armed = False
        await manager.aclose()
