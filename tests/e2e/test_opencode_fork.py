"""Forked tasks against a real ``opencode serve``: the parent's history reaches the child."""

from __future__ import annotations

from typing import Any

from asyncagents.tasks import TOOL_NAMES, OpenCodeBackend, PromptRequest, TaskManager, TaskStatus
from e2e_support import AGENT, model_got, say, until
from fake_model import TOOL_OUTPUT_MARK, FakeModel
from parent_notices import texts

PREAMBLE = "You are working with forked context from a parent agent session."


def _user_texts(request: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for message in request.get("messages") or ():
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append("".join(str(p.get("text", "")) for p in content if isinstance(p, dict)))
    return out


async def test_fork_injects_the_parents_context(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    await say(backend, parent, "Please look at src/app.py and note compute_total")
    tool_reply = await say(backend, parent, "[fake:tool] check the build")
    assert texts(tool_reply) == ["Tool step done. Reply to: [fake:tool] check the build"]

    prompt = "[fake:context] continue from what we saw"
    task = await manager.task(parent, prompt, AGENT, "forked child", fork=True)
    assert task.is_forked and task.status is TaskStatus.RUNNING
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "context-seen"
    assert out.task.is_forked and out.task.label == f"{task.id} (forked)"
    stats = out.task.fork_stats
    assert stats is not None and stats["original_count"] == 5  # user, reply, user, tool step, reply

    assert out.task.session_id is not None
    messages = await backend.messages(out.task.session_id)
    roles = [m["info"]["role"] for m in messages]
    assert roles == ["user", "user", "assistant"]
    injected, sent, answer = messages
    (context,) = texts(injected)
    assert context.startswith(PREAMBLE)
    assert "<inherited_context>" in context and TOOL_OUTPUT_MARK in context
    assert "compute_total" in context
    assert texts(sent) == [prompt]
    assert texts(answer) == ["context-seen"]
    # both child prompts switch the task tools off and run the asked agent
    for user in (injected, sent):
        assert user["info"]["tools"] == dict.fromkeys(TOOL_NAMES, False)
        assert user["info"]["agent"] == AGENT

    # what the model got: the injected context as an earlier user message, then the prompt
    (request,) = [r for r in fake_model.requests if prompt in _user_texts(r)[-1:]]
    users = _user_texts(request)
    assert users[-1] == prompt
    assert any(u.startswith(PREAMBLE) and TOOL_OUTPUT_MARK in u for u in users[:-1])
    offered = {t["function"]["name"] for t in request.get("tools") or ()}
    assert "bash" in offered and not offered & set(TOOL_NAMES)


async def test_fork_of_a_missing_parent_ends_in_error(
    manager: TaskManager, backend: OpenCodeBackend
) -> None:
    missing = "ses_0000000000000000000000000a"
    task = await manager.task(missing, "[fake:context] x", AGENT, "no parent", fork=True)
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.ERROR
    assert out.task.result is None
    assert out.task.error == (
        f"fork: reading the parent's messages failed: Session not found: {missing}"
    )
    # no prompt went to the child without its context
    assert out.task.session_id is not None
    assert await backend.messages(out.task.session_id) == []


async def test_fork_while_the_parent_is_mid_turn(
    manager: TaskManager, backend: OpenCodeBackend, parent: str, fake_model: FakeModel
) -> None:
    """The usual case: the parent agent forks from inside its own running turn."""
    await say(backend, parent, "[fake:tool] gather facts")
    busy_prompt = "[fake:slow] parent still talking"
    await backend.prompt_async(parent, PromptRequest(text=busy_prompt, agent=AGENT))
    await until(lambda: model_got(fake_model, busy_prompt), what="parent streaming")
    assert parent in await backend.status()

    task = await manager.task(parent, "[fake:context] go on", AGENT, "mid-turn fork", fork=True)
    out = await manager.output(task.id, block=True, timeout=60)
    assert out.task.status is TaskStatus.COMPLETED, out.task.error
    assert out.task.result == "context-seen"
    assert out.task.session_id is not None
    (injected, *_) = await backend.messages(out.task.session_id)
    (context,) = texts(injected)
    assert context.startswith(PREAMBLE) and TOOL_OUTPUT_MARK in context
    await backend.abort(parent)
