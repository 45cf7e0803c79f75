"""SIGTERM to ``asyncagents serve`` with launches in flight: every acknowledged task runs once.

The fake OpenCode server holds each ``prompt_async`` for 3 s, so the stop comes while a hundred
prompts are being sent. The stop waits for them; the restart on the same store follows them to
the end. Each child holds its prompt exactly once, and each task completes with its reply.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_opencode import FakeOpenCodeProcess
from polling import until
from test_serve import Service

LAUNCHES = 100
PARENTS = 10
HOLD = 3.0


class DrainService(Service):
    """`asyncagents serve` over the fake OpenCode server at `opencode`."""

    def __init__(self, root: Path, opencode: str) -> None:
        super().__init__(root)
        self.opencode = opencode

    def argv(self, store: str, *extra: str) -> list[str]:
        argv = super().argv(store, *extra)
        argv[argv.index("--opencode") + 1] = self.opencode
        return argv


@pytest.fixture
def fake_server() -> Iterator[FakeOpenCodeProcess]:
    with FakeOpenCodeProcess(heartbeat=2.0) as server:
        yield server


def stored_tasks(path: Path) -> dict[str, tuple[str, str]]:
    """Task id -> (status, child session id), read from the store file."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, status, session_id FROM tasks").fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def user_prompts(url: str, session_id: str, prompt: str) -> int:
    response = httpx.get(f"{url}/session/{session_id}/message", timeout=30)
    response.raise_for_status()
    return sum(
        (m.get("info") or {}).get("role") == "user"
        and any(p.get("text") == prompt for p in m.get("parts") or ())
        for m in response.json()
    )


async def launch_all(svc: Service, token: str, parents: list[str]) -> dict[str, str]:
    """Start `LAUNCHES` tasks at once; task id -> prompt, for each acknowledged one."""
    async with httpx.AsyncClient(
        base_url=svc.url, headers={"authorization": f"Bearer {token}"}, timeout=120
    ) as client:

        async def one(i: int) -> tuple[str, str]:
            prompt = f"drained launch {i}"
            response = await client.post(
                "/v1/tools/asyncagents_task",
                json={
                    "session_id": parents[i % len(parents)],
                    "agent": "build",
                    "arguments": {"prompt": prompt, "agent": "build", "description": f"d{i}"},
                },
            )
            text = response.json()["text"]
            found = re.search(r"tsk_[0-9a-f]+", text)
            assert response.status_code == 200 and found, text
            return found.group(0), prompt

        return dict(await asyncio.gather(*(one(i) for i in range(LAUNCHES))))


async def test_sigterm_with_launches_in_flight_loses_none(
    fake_server: FakeOpenCodeProcess, tmp_path: Path
) -> None:
    url = fake_server.url
    with httpx.Client(base_url=url, timeout=30) as client:
        parents = [
            str(client.post("/session", json={"title": f"p{i}"}).json()["id"])
            for i in range(PARENTS)
        ]
    fake_server.add_fault(r"/session/[^/]+/prompt_async", "delay", method="POST", hold=HOLD)
    service = DrainService(tmp_path, url)
    try:
        service.start()
        token = service.token_path.read_text().strip()
        acknowledged = await launch_all(service, token, parents)
        status, out = service.stop(signal.SIGTERM)
        assert status == 0, out
        assert len(acknowledged) == LAUNCHES
        store = tmp_path / "tasks.sqlite3"
        at_stop = stored_tasks(store)
        assert set(at_stop) == set(acknowledged)
        assert all(state != "error" for state, _ in at_stop.values()), at_stop

        fake_server.clear_faults()
        service.start()

        def all_completed() -> bool:
            return all(state == "completed" for state, _ in stored_tasks(store).values())

        await until(all_completed, 120, "every acknowledged task completed", every=0.5)
        final = stored_tasks(store)
        for task_id, prompt in acknowledged.items():
            _, session_id = final[task_id]
            assert user_prompts(url, session_id, prompt) == 1, task_id
        status, out = service.stop(signal.SIGTERM)
        assert status == 0, out
    finally:
        service.kill()
