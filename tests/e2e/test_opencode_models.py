"""A model per task and a fork sized to the child's model, on a real ``opencode serve``."""

from __future__ import annotations

import json
from typing import Any

from asyncagents.tasks import InMemoryTaskStore, OpenCodeBackend, TaskManager, TaskStatus
from asyncagents.tasks.tools import run_tool
from e2e_support import AGENT, SMALL_MODEL, manager_config, say
from fake_model import FakeModel
from parent_notices import texts
from polling import session_of

#: (16000 - 4096 - 8000) tokens at 3 characters a token, less 1000 for the preamble and 36
#: for the prompt
SMALL_BUDGET = 10676
SMALL_REASON = (
    "sized to the context window of fake/fake-small: 16000 tokens, less 4096 for output and "
    "8000 for OpenCode's system prompt and tools, at 3 characters a token, less 1000 "
    "characters for this preamble and 36 for the task's prompt"
)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _requests_with(fake_model: FakeModel, marker: str) -> list[dict[str, Any]]:
    return [
        r
        for r in list(fake_model.requests)
        if any(marker in _content(m) for m in r.get("messages") or () if m.get("role") == "user")
    ]


async def test_a_task_on_a_chosen_model_reaches_that_model(
    manager: TaskManager, parent: str, fake_model: FakeModel
) -> None:
    prompt = "which model answers me"
    task = await manager.task(parent, prompt, AGENT, "small model", model=SMALL_MODEL)
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.model == SMALL_MODEL
    (request,) = _requests_with(fake_model, prompt)
    assert request["model"] == "fake-small"
    listed = await run_tool(manager, parent, "asyncagents_list", {})
    assert f"- `{task.id}` [completed] {AGENT} on fake/fake-small: small model" in listed
    # without a model the server's default answers, as before
    plain = await manager.task(parent, "the default answers", AGENT, "default model")
    assert (await manager.output(plain.id, block=True, timeout=60)).task.model is None
    (default_request,) = _requests_with(fake_model, "the default answers")
    assert default_request["model"] == "fake-model"


async def test_a_model_the_server_does_not_offer_is_refused(
    manager: TaskManager, parent: str
) -> None:
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "x", "agent": AGENT, "model": "fake/gpt"}
    )
    assert text == (
        'Error: model "fake/gpt" is not offered by the OpenCode server. The models allowed '
        "are: fake/fake-model, fake/fake-small. Call asyncagents_task again with one of them, "
        "or without model for the default."
    )
    assert await manager.list(parent) == []


async def test_a_fallback_model_the_server_does_not_offer_is_refused(
    backend: OpenCodeBackend, parent: str
) -> None:
    config = manager_config(fallback_models=(SMALL_MODEL, "fake/gpt"))
    async with TaskManager(backend, InMemoryTaskStore(), config) as manager:
        text = await run_tool(manager, parent, "asyncagents_task", {"prompt": "x", "agent": AGENT})
        assert text == (
            'Error: The task manager\'s config is wrong: fallback_models has "fake/gpt", which '
            "is not offered by the OpenCode server. The models allowed are: fake/fake-model, "
            "fake/fake-small. No new task starts until fallback_models is fixed in the "
            "asyncagents config: tell the user."
        )
        assert await manager.list(parent) == []


async def test_a_fork_to_a_small_model_fits_its_first_request(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    # about 120,000 characters of parent history: the default budget would send all of it
    for n in range(4):
        await say(backend, parent, f"part {n}: " + ("lorem ipsum dolor " * 1700))
    prompt = "[fake:context] small child continues"
    task = await manager.task(parent, prompt, AGENT, "small fork", fork=True, model=SMALL_MODEL)
    out = await manager.output(task.id, block=True, timeout=90)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "context-seen"
    stats = out.task.fork_stats or {}
    assert stats["char_budget"] == SMALL_BUDGET
    assert stats["budget_reason"] == SMALL_REASON
    assert stats["removed_messages"] > 0

    # the child's first request to the model: the inherited context at 3 characters a token
    # (the budget's rate) and the rest of the request (OpenCode's system prompt, tool schemas,
    # the prompt) at 4 (OpenCode's own estimate) leave room for the model's 4096 output tokens
    (request,) = _requests_with(fake_model, prompt)
    assert request["model"] == "fake-small"
    messages = request["messages"]
    (inherited,) = [m for m in messages if "<inherited_context>" in _content(m)]
    context_chars = len(_content(inherited))
    assert context_chars <= SMALL_BUDGET + 1000  # the budget and the preamble
    assert f"- Char budget {SMALL_BUDGET}: {SMALL_REASON}\n" in _content(inherited)
    rest_chars = sum(len(_content(m)) for m in messages) - context_chars
    rest_chars += len(json.dumps(request.get("tools") or [], separators=(",", ":")))
    assert context_chars / 3 + rest_chars / 4 <= 16000 - 4096
    # OpenCode did not have to compact the child to read it
    task.session_id = await session_of(manager, task.id)
    child = await backend.messages(task.session_id)
    assert not any(p.get("type") == "compaction" for m in child for p in m["parts"])


async def test_fork_turns_keeps_the_last_two_turns(
    manager: TaskManager, backend: OpenCodeBackend, parent: str
) -> None:
    for n in range(4):
        await say(backend, parent, f"turn marker {n}")
    prompt = "[fake:context] two turns only"
    text = await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": prompt, "agent": AGENT, "fork": True, "fork_turns": 2},
    )
    assert text.startswith("Background task started: ")
    (task,) = await manager.list(parent)
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "context-seen"
    assert out.task.fork_turns == 2
    assert out.task.session_id is not None
    (injected, *_) = await backend.messages(out.task.session_id)
    (context,) = texts(injected)
    assert "- Only the last 2 user turns kept (4 earlier messages removed)\n" in context
    assert "turn marker 2" in context and "turn marker 3" in context
    assert "turn marker 0" not in context and "turn marker 1" not in context
