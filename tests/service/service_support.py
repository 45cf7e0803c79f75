"""Support of the service tests: a scripted in-process model and an app client."""

from __future__ import annotations

import asyncio

from asyncagents.tasks import InProcessTurn, ProviderError


class Responder:
    """Replies by tags in the prompt: [tool], [fail], [hold] (until `release`), else a reply."""

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
        return "Reply to: " + turn.prompt


#: the bearer token of the apps under test
TOKEN = "t" * 64
