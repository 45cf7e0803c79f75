"""A scripted responder for the in-process backend, shared by the task and service tests."""

from __future__ import annotations

import asyncio

from asyncagents.tasks import InProcessTurn, ProviderError


class Script:
    """Replies by tags in the prompt, like the e2e fake model: [tool], [fail], [hold], [sleep]."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[InProcessTurn] = []

    async def __call__(self, turn: InProcessTurn) -> str:
        self.seen.append(turn)
        if "[tool]" in turn.prompt:
            await turn.tool("bash", {"command": "echo hi"}, "hi")
        if "[fail]" in turn.prompt:
            raise ProviderError("Invalid request: rejected by the provider")
        if "[hold]" in turn.prompt:
            await self.release.wait()
        if "[sleep]" in turn.prompt:
            await asyncio.sleep(0.05)
        return "Reply to: " + turn.prompt
