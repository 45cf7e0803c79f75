"""OpenCode 1.18.33 takes the message id we choose, and a prompt sent twice with one id is one
message, answered once: what makes a re-sent prompt (after a stop or a crash) safe."""

from __future__ import annotations

import asyncio

from asyncagents.tasks import OpenCodeBackend, PromptRequest
from asyncagents.tasks.models import message_id_after
from e2e_support import AGENT, until
from fake_model import FakeModel


def model_calls(fake_model: FakeModel, prompt: str) -> int:
    """Requests to the model whose last user message holds `prompt` (title requests aside)."""
    count = 0
    for request in list(fake_model.requests):
        users = [m for m in request.get("messages") or () if m.get("role") == "user"]
        if users and prompt in str(users[-1].get("content")) and request.get("tools"):
            count += 1
    return count


async def test_a_prompt_sent_twice_with_one_message_id_is_answered_once(
    backend: OpenCodeBackend, fake_model: FakeModel
) -> None:
    session = await backend.create_session(title="prompt ids")
    sid = str(session["id"])
    prompt = "[fake:delay=1] answer me once"
    message_id = message_id_after(None, session["time"]["created"], "a1b2c3")
    request = PromptRequest(text=prompt, agent=AGENT, message_id=message_id)

    await backend.prompt_async(sid, request)
    await backend.prompt_async(sid, request)  # while the first turn runs

    async def answered() -> bool:
        if (await backend.status()).get(sid):
            return False
        messages = await backend.messages(sid)
        return any(
            m["info"]["role"] == "assistant" and m["info"].get("time", {}).get("completed")
            for m in messages
        )

    await until(answered, 60, "the turn ended")
    await backend.prompt_async(sid, request)  # after it was answered
    await asyncio.sleep(2)
    await until(answered, 30, "idle again")

    messages = await backend.messages(sid)
    users = [m for m in messages if m["info"]["role"] == "user"]
    assert [m["info"]["id"] for m in users] == [message_id]
    assert [p["id"] for p in users[0]["parts"]] == ["prt" + message_id[3:]]
    assert [p.get("text") for p in users[0]["parts"]] == [prompt]
    assistants = [m for m in messages if m["info"]["role"] == "assistant"]
    assert len(assistants) == 1
    assert assistants[0]["info"]["id"] > message_id
    assert model_calls(fake_model, "answer me once") == 1
