"""A model per task, the fork budget sized to the child's model, and `fork_turns`
(in-process backend, both stores)."""

from __future__ import annotations

import asyncio
import re

import pytest
from asyncagents.tasks import InProcessBackend, TaskManager, TaskManagerConfig, TaskStatus
from asyncagents.tasks.backend import JSON
from asyncagents.tasks.catalog import ModelInfo, parse_providers
from asyncagents.tasks.fork_budget import fork_config
from asyncagents.tasks.notices import notice_tag
from asyncagents.tasks.store import TaskStore
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import until
from tasks_script import Script

SMALL = "small/tiny"

ZERO = "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."


def _small_reason(prompt_chars: int) -> str:
    return (
        "sized to the context window of small/tiny: 16000 tokens, less 4096 for output and 8000 "
        "for OpenCode's system prompt and tools, at 3 characters a token, less 1000 characters "
        f"for this preamble and {prompt_chars} for the task's prompt"
    )


def _providers() -> JSON:
    return {
        "providers": [
            {
                "id": "inprocess",
                "models": {
                    "inprocess": {"id": "inprocess", "limit": {"context": 200000, "output": 8192}}
                },
            },
            {
                "id": "small",
                "models": {"tiny": {"id": "tiny", "limit": {"context": 16000, "output": 4096}}},
            },
            {"id": "big", "models": {"huge": {"id": "huge"}}},
        ],
        "default": {"inprocess": "inprocess"},
    }


class _CountingBackend(InProcessBackend):
    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.provider_reads = 0
        self.providers_body = _providers()

    async def providers(self) -> JSON:
        self.provider_reads += 1
        return await super().providers()


def _config(**kw: object) -> TaskManagerConfig:
    return TaskManagerConfig.model_validate(
        {"poll_interval": 0.2, "notice_retry_initial": 0.05, "wake": "never", **kw}
    )


@pytest.fixture
def models_backend(script: Script) -> _CountingBackend:
    return _CountingBackend(script)


async def _manager(backend: InProcessBackend, store: TaskStore, **kw: object) -> TaskManager:
    manager = TaskManager(backend, store, _config(**kw))
    await manager.start()
    await asyncio.wait_for(manager.events.connected.wait(), 5)
    return manager


async def test_a_task_runs_on_its_model_and_says_so_everywhere(
    models_backend: _CountingBackend, store: TaskStore, script: Script
) -> None:
    manager = await _manager(models_backend, store)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        text = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "hello", "agent": "explore", "description": "small one", "model": SMALL},
        )
        task_id = re.search(r"tsk_[0-9a-f]+", text)
        assert task_id
        tid = task_id.group(0)
        assert text == (
            f"Background task started: `{tid}`\nAgent: explore\nModel: small/tiny\n"
            "Description: small one\nStatus: running\nYou will get a notice in this session "
            "when it completes or fails; continue with other work meanwhile. To wait for it "
            f'now, call `asyncagents_output(task_id="{tid}", block=true)`.'
        )
        out = await run_tool(
            manager, parent, "asyncagents_output", {"task_id": tid, "block": True, "timeout": 5}
        )
        assert out == (
            f"Task `{tid}` [completed] explore on small/tiny: small one\n\nResult:\nReply to: hello"
            f"\n{ZERO}"
        )
        listed = await run_tool(manager, parent, "asyncagents_list", {})
        assert listed == (
            f"Background tasks (newest first):\n- `{tid}` [completed] explore on small/tiny: "
            "small one (0 tokens, $0.00)"
        )
        # the prompt carried the model; the responder saw it on the user message
        body = next(b for _, b in models_backend.prompts if b.get("messageID"))
        assert body["model"] == {"providerID": "small", "modelID": "tiny"}
        assert script.seen[0].user_message["info"]["model"] == body["model"]
        task = await manager.store.get(tid)
        assert task is not None and task.model == SMALL
        await until(lambda: notices_in(models_backend, parent), 5, "the notice")
        notices = await notices_in(models_backend, parent)
        ntc = re.search(r"ntc_[0-9a-f]+", notices[0])
        assert ntc
        assert notices[0] == (
            f"{notice_tag(ntc.group(0))}\nBackground task `{tid}` completed: small one\n"
            "Model: small/tiny\nResult:\nReply to: hello\n\n"
            f'Read it again with `asyncagents_output(task_id="{tid}")`. Continue it with '
            f'`asyncagents_task(resume="{tid}", prompt=...)`.\n{ZERO}\n\n'
            "You have no background tasks still running."
        )
    finally:
        await manager.close()


ALLOWED_ALL = "big/huge, inprocess/inprocess, small/tiny"


@pytest.mark.parametrize(
    ("model", "allowed", "expected"),
    [
        (
            "small/nope",
            None,
            'Error: model "small/nope" is not offered by the OpenCode server. The models '
            f"allowed are: {ALLOWED_ALL}. Call asyncagents_task again with one of them, or "
            "without model for the default.",
        ),
        (
            "tiny",
            None,
            'Error: model "tiny" is not written as provider/model. The models allowed are: '
            f"{ALLOWED_ALL}. Call asyncagents_task again with one of them, or without model "
            "for the default.",
        ),
        (
            "big/huge",
            ("small/tiny", "inprocess/inprocess", "gone/model"),
            'Error: model "big/huge" is not in this task manager\'s allowed_models. The models '
            "allowed are: inprocess/inprocess, small/tiny. Call asyncagents_task again with "
            "one of them, or without model for the default.",
        ),
        (
            "big/huge",
            (),
            'Error: model "big/huge" is not in this task manager\'s allowed_models. The models '
            "allowed are: none. Call asyncagents_task again with one of them, or without model "
            "for the default.",
        ),
    ],
)
async def test_a_model_not_offered_or_not_allowed_is_refused_naming_the_allowed(
    models_backend: _CountingBackend,
    store: TaskStore,
    model: str,
    allowed: tuple[str, ...] | None,
    expected: str,
) -> None:
    manager = await _manager(models_backend, store, allowed_models=allowed)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "x", "agent": "a", "model": model}
        )
        assert text == expected
        assert await manager.list(parent) == []
        assert len(models_backend.session_ids()) == 1  # no child session was made
    finally:
        await manager.close()


async def test_without_a_model_the_default_stays_and_the_models_are_read_once(
    models_backend: _CountingBackend, store: TaskStore
) -> None:
    manager = await _manager(models_backend, store)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        plain = await manager.task(parent, "one", "explore", "plain")
        assert plain.model is None
        first = await manager.task(parent, "two", "explore", "chosen", model=SMALL)
        second = await manager.task(parent, "three", "explore", "chosen", model=SMALL)
        assert first.model == second.model == SMALL
        assert models_backend.provider_reads == 1  # cached for models_ttl
        await manager.wait_idle()
        bodies = [b for _, b in models_backend.prompts]
        assert "model" not in bodies[0]
        listed = await run_tool(manager, parent, "asyncagents_list", {})
        assert (
            f"- `{plain.id}` [completed] explore: plain (0 tokens, $0.00)" in listed.splitlines()
            or (f"- `{plain.id}` [running] explore: plain (0 tokens, $0.00)" in listed.splitlines())
        )
    finally:
        await manager.close()
    configured = await _manager(
        models_backend, store, model={"providerID": "small", "modelID": "tiny"}
    )
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        task = await configured.task(parent, "four", "explore", "configured")
        assert task.model == SMALL
    finally:
        await configured.close()


async def test_model_and_fork_turns_with_resume_or_without_fork_are_refused(
    models_backend: _CountingBackend, store: TaskStore
) -> None:
    manager = await _manager(models_backend, store)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        done = await manager.task(parent, "one", "explore", "d")
        await manager.output(done.id, block=True, timeout=5)
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "x", "resume": done.id, "model": SMALL}
        )
        assert text == (
            "Error: model and fork_turns apply to a new task; a resumed task keeps its model "
            "and its history. Call asyncagents_task again without them."
        )
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "x", "agent": "a", "fork_turns": 2}
        )
        assert text == (
            "Error: fork_turns applies only with fork=true. Call asyncagents_task again with "
            "fork=true, or without fork_turns."
        )
        text = await run_tool(
            manager,
            parent,
            "asyncagents_task",
            {"prompt": "x", "agent": "a", "fork": True, "fork_turns": "0", "model": 5},
        )
        assert text == (
            "Error: invalid arguments for asyncagents_task:\n"
            "- model: must be a string written provider/model (got 5)\n"
            '- fork_turns: must be "all" or a whole number of at least 1 (got "0")'
        )
    finally:
        await manager.close()


def _parent_turns(backend: InProcessBackend, parent: str, turns: int, size: int) -> None:
    for n in range(turns):
        backend.add_message(parent, "user", f"question {n} " + "q" * size)
        backend.add_message(parent, "assistant", f"answer {n} " + "a" * size)


async def test_a_fork_to_a_small_model_gets_a_budget_that_fits_its_window(
    models_backend: _CountingBackend, store: TaskStore
) -> None:
    manager = await _manager(models_backend, store)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        _parent_turns(models_backend, parent, 10, 3000)  # about 60,000 characters
        task = await manager.task(parent, "go", "explore", "small fork", fork=True, model=SMALL)
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED, out.task.error
        stats = out.task.fork_stats or {}
        assert stats["char_budget"] == 10710  # (16000 - 4096 - 8000) * 3 - 1000 - len("go")
        assert stats["budget_reason"] == _small_reason(2)
        assert stats["removed_messages"] > 0
        assert out.task.session_id
        injected = (await models_backend.messages(out.task.session_id))[0]["parts"][0]["text"]
        assert f"- Char budget 10710: {_small_reason(2)}\n" in injected
        assert "oldest messages removed to fit 10710 char budget" in injected
        context = injected.split("<inherited_context>", 1)[1]
        assert len("<inherited_context>" + context) <= 10710
    finally:
        await manager.close()


async def test_fork_turns_keeps_the_last_turns_and_says_so(
    models_backend: _CountingBackend, store: TaskStore
) -> None:
    manager = await _manager(models_backend, store)
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        _parent_turns(models_backend, parent, 5, 10)
        task = await manager.task(parent, "go", "explore", "two turns", fork=True, fork_turns=2)
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED, out.task.error
        assert out.task.fork_turns == 2 and (out.task.fork_stats or {})["fork_turns"] == 2
        assert out.task.session_id
        injected = (await models_backend.messages(out.task.session_id))[0]["parts"][0]["text"]
        assert "- Only the last 2 user turns kept (6 earlier messages removed)\n" in injected
        assert "question 3" in injected and "question 4" in injected
        assert "question 2" not in injected
        # a fork to a model with a large window reads the seed's preamble (no budget line)
        assert "Char budget" not in injected
    finally:
        await manager.close()


def test_fork_budget_numbers() -> None:
    small = fork_config(SMALL, ModelInfo(name=SMALL, context=16000, output=4096), None)
    assert (small.char_budget, small.budget_reason) == (10712, _small_reason(0))
    tiny = fork_config("t/t", ModelInfo(name="t/t", context=9000, output=2000), 3)
    assert tiny.char_budget == 0 and tiny.fork_turns == 3
    unknown = fork_config("big/huge", ModelInfo(name="big/huge"), None)
    assert unknown.char_budget == 200_000
    assert unknown.budget_reason == "the default, as the context window of big/huge is not known"
    default = fork_config(None, None, None)
    assert default.budget_reason == (
        "the default, as the context window of the server's default model is not known"
    )
    assert parse_providers(_providers())[SMALL] == ModelInfo(name=SMALL, context=16000, output=4096)
    assert parse_providers({"providers": [{"id": 3}, "x", {"id": "p", "models": []}]}) == {}


class _NoCatalog(InProcessBackend):
    async def providers(self) -> JSON:
        from asyncagents.tasks import BackendUnavailableError

        raise BackendUnavailableError("config/providers is down (test)")


async def test_a_fork_whose_models_cannot_be_read_gets_the_default_budget(
    script: Script, store: TaskStore
) -> None:
    backend = _NoCatalog(script)
    manager = await _manager(backend, store)
    try:
        parent = str((await backend.create_session(title="p"))["id"])
        _parent_turns(backend, parent, 2, 10)
        task = await manager.task(parent, "go", "explore", "no catalog", fork=True)
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED, out.task.error
        stats = out.task.fork_stats or {}
        assert stats["char_budget"] == 200_000
        assert stats["budget_reason"] == (
            "the default, as the context window of the server's default model is not known"
        )
        # and a task asking for a model is told the server cannot say
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "x", "agent": "a", "model": SMALL}
        )
        assert text == "Error: config/providers is down (test)"
    finally:
        await manager.close()


@pytest.mark.parametrize(
    ("fallbacks", "allowed", "expected"),
    [
        (
            ("small/tiny", "big/gone"),
            None,
            'Error: The task manager\'s config is wrong: fallback_models has "big/gone", which '
            "is not offered by the OpenCode server. The models allowed are: big/huge, "
            "inprocess/inprocess, small/tiny. No new task starts until fallback_models is fixed "
            "in the asyncagents config: tell the user.",
        ),
        (
            ("big/huge",),
            ("inprocess/inprocess", "small/tiny"),
            'Error: The task manager\'s config is wrong: fallback_models has "big/huge", which '
            "is not in this task manager's allowed_models. The models allowed are: "
            "inprocess/inprocess, small/tiny. No new task starts until fallback_models is fixed "
            "in the asyncagents config: tell the user.",
        ),
        (
            ("tiny",),
            None,
            'Error: The task manager\'s config is wrong: fallback_models has "tiny", which is '
            "not written as provider/model. The models allowed are: big/huge, "
            "inprocess/inprocess, small/tiny. No new task starts until fallback_models is fixed "
            "in the asyncagents config: tell the user.",
        ),
    ],
)
async def test_fallback_models_are_checked_against_the_servers_models(
    models_backend: _CountingBackend,
    store: TaskStore,
    fallbacks: tuple[str, ...],
    allowed: tuple[str, ...] | None,
    expected: str,
) -> None:
    manager = await _manager(
        models_backend, store, fallback_models=fallbacks, allowed_models=allowed
    )
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        text = await run_tool(manager, parent, "asyncagents_task", {"prompt": "x", "agent": "a"})
        assert text == expected
        assert await manager.list(parent) == []
        assert len(models_backend.session_ids()) == 1  # no child session was made
    finally:
        await manager.close()


async def test_fallback_models_the_server_offers_let_tasks_start(
    models_backend: _CountingBackend, store: TaskStore
) -> None:
    manager = await _manager(models_backend, store, fallback_models=("small/tiny", "big/huge"))
    try:
        parent = str((await models_backend.create_session(title="p"))["id"])
        task = await manager.task(parent, "x", "a", "fine")
        out = await manager.output(task.id, block=True, timeout=5)
        assert out.task.status is TaskStatus.COMPLETED
    finally:
        await manager.close()
