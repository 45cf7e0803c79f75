"""Parent session titles: what `GET /v1/tasks/{id}` says in ``parent_title``, and the bounded,
expiring cache with a deadline behind it (`SessionTitles`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
from asyncagents.tasks import InProcessBackend, TaskManager
from asyncagents.tasks.backend import SessionBackend
from asyncagents.tasks.errors import BackendHTTPError, SessionNotFoundError
from asyncagents.tasks.session_titles import MAX_TITLE_CHARS, SessionTitles

#: part of OpenCode 1.18.33's answer to GET /session/{id} (a recorded response)
SESSION = {
    "id": "ses_dfc82086fffewv6oltA416egUq",
    "slug": "calm-planet",
    "title": "Fixture session: Please look around: list the filesystem",
    "version": "1.18.33",
    "time": {"created": 1795354916752, "updated": 1795355028919},
}


class Sessions:
    """A backend's `get_session` only: answers from `titles`, counts the reads, may stall."""

    def __init__(self, titles: dict[str, Any]) -> None:
        self.titles = titles
        self.reads: list[str] = []
        self.stall = asyncio.Event()
        self.stall.set()

    async def get_session(self, session_id: str) -> dict[str, Any]:
        self.reads.append(session_id)
        await self.stall.wait()
        if session_id not in self.titles:
            raise SessionNotFoundError(session_id)
        value = self.titles[session_id]
        if isinstance(value, Exception):
            raise value
        return {"id": session_id, "title": value}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def titles_over(sessions: Sessions, **kw: Any) -> SessionTitles:
    return SessionTitles(cast(SessionBackend, sessions), **kw)


async def test_a_title_is_read_once_then_again_after_its_ttl() -> None:
    sessions = Sessions({SESSION["id"]: SESSION["title"]})
    clock = Clock()
    titles = titles_over(sessions, ttl=60, clock=clock)
    assert await titles.title(str(SESSION["id"])) == SESSION["title"]
    assert await titles.title(str(SESSION["id"])) == SESSION["title"]
    assert sessions.reads == [SESSION["id"]]
    sessions.titles[str(SESSION["id"])] = "Renamed after the first exchange"
    clock.now += 61
    assert await titles.title(str(SESSION["id"])) == "Renamed after the first exchange"
    assert len(sessions.reads) == 2


async def test_failures_are_none_and_asked_again_after_the_failure_ttl() -> None:
    error = BackendHTTPError("OpenCode answered HTTP 500", 500)
    sessions = Sessions(
        {"ses_broken": error, "ses_blank": "   ", "ses_odd": 42, "ses_bug": KeyError("x")}
    )
    clock = Clock()
    titles = titles_over(sessions, failure_ttl=10, clock=clock)
    for sid in ("ses_gone", "ses_broken", "ses_blank", "ses_odd", "ses_bug"):
        assert await titles.title(sid) is None
    assert await titles.title("ses_gone") is None
    assert sessions.reads == ["ses_gone", "ses_broken", "ses_blank", "ses_odd", "ses_bug"]
    clock.now += 11
    sessions.titles["ses_gone"] = "Back"
    assert await titles.title("ses_gone") == "Back"


async def test_a_slow_server_is_none_within_the_deadline() -> None:
    sessions = Sessions({"ses_slow": "Slow"})
    sessions.stall.clear()
    titles = titles_over(sessions, deadline=0.2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await titles.title("ses_slow") is None
    assert loop.time() - start < 2


async def test_concurrent_callers_share_one_read() -> None:
    sessions = Sessions({"ses_a": "A"})
    sessions.stall.clear()
    titles = titles_over(sessions)
    calls = [asyncio.ensure_future(titles.title("ses_a")) for _ in range(5)]
    await asyncio.sleep(0.05)
    sessions.stall.set()
    assert await asyncio.gather(*calls) == ["A"] * 5
    assert sessions.reads == ["ses_a"]


async def test_the_cache_is_bounded_and_titles_are_cut() -> None:
    sessions = Sessions({f"ses_{n}": f"Session {n}" for n in range(10)})
    sessions.titles["ses_long"] = "word\n " * 100
    titles = titles_over(sessions, max_entries=3)
    for n in range(10):
        assert await titles.title(f"ses_{n}") == f"Session {n}"
    assert len(titles) == 3
    await titles.title("ses_9")  # kept: no new read
    assert sessions.reads.count("ses_9") == 1
    await titles.title("ses_0")  # evicted: read again
    assert sessions.reads.count("ses_0") == 2
    long = await titles.title("ses_long")
    assert long is not None and len(long) == MAX_TITLE_CHARS
    assert long == ("word " * 100)[: MAX_TITLE_CHARS - 1] + "…"


async def test_one_task_names_its_parent_by_title(
    client: httpx.AsyncClient, manager: TaskManager, backend: InProcessBackend, parent: str
) -> None:
    task = await manager.task(parent, "Summarise the README", "general", "Readme")
    body = (await client.get(f"/v1/tasks/{task.id}")).json()
    assert body["parent_session_id"] == parent
    assert body["parent_title"] == "parent"
    assert await manager.session_title("ses_unknown") is None
    # the list does not carry it (one read per parent, by the page, through the task's answer)
    listed = (await client.get("/v1/tasks")).json()["tasks"]
    assert "parent_title" not in listed[0]
    doc = (await client.get("/v1/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    # one task's answer is its own schema (TaskDetail: the listed Task and more)
    assert "parent_title" in schemas["TaskDetail"]["properties"]
    assert "parent_title" not in schemas["Task"]["properties"]
