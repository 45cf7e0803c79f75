"""The fake OpenCode server serves the API subset the backend uses, in OpenCode's shapes."""

from __future__ import annotations

import asyncio

import httpx
from asyncagents.tasks import OpenCodeBackend, PromptRequest, SessionNotFoundError
from fake_opencode import FakeOpenCode, FakeOpenCodeProcess
from polling import until


async def test_sessions_prompts_messages_and_events_round_trip() -> None:
    with FakeOpenCode(heartbeat=0.2) as server:
        async with OpenCodeBackend(server.url, timeout=5) as backend:
            parent = await backend.create_session(title="parent")
            child = await backend.create_session(parent_id=parent["id"], title="child")
            assert child["parentID"] == parent["id"]
            assert (await backend.get_session(child["id"]))["title"] == "child"

            stream = backend.events()
            assert (await anext(stream))["type"] == "server.connected"
            await backend.prompt_async(child["id"], PromptRequest(text="go [tool]"))
            seen: list[str] = []
            while "session.idle" not in seen:
                seen.append(str((await asyncio.wait_for(anext(stream), 5))["type"]))
            assert seen.index("session.status") < seen.index("session.idle")
            # heartbeats keep an idle stream alive
            assert (await asyncio.wait_for(anext(stream), 5))["type"] == "server.heartbeat"
            await stream.aclose()  # type: ignore[attr-defined]

            messages = await backend.messages(child["id"])
            assert [m["info"]["role"] for m in messages] == ["user", "assistant", "assistant"]
            assert messages[1]["info"]["finish"] == "tool-calls"
            assert messages[-1]["parts"][0]["text"] == "Reply to: go [tool]"
            assert await backend.messages(child["id"], limit=1) == messages[-1:]
            assert b'"Reply to: go [tool]"' in await backend.messages_raw(child["id"])

            stored = await backend.prompt(parent["id"], PromptRequest(text="note", no_reply=True))
            assert stored["info"]["role"] == "user"
            assert stored["parts"][0]["text"] == "note"
            assert await backend.status() == {}
            assert await backend.abort(child["id"]) is True

            await backend.delete_session(parent["id"])  # children go with it, as in OpenCode
            for sid in (parent["id"], child["id"]):
                try:
                    await backend.get_session(sid)
                    raise AssertionError("session still there")
                except SessionNotFoundError as exc:
                    assert exc.session_id == sid


async def test_unknown_session_answers_opencodes_not_found_json() -> None:
    with FakeOpenCode() as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            response = await client.get("/session/ses_nope/message")
    assert response.status_code == 404
    assert response.json() == {
        "name": "NotFoundError",
        "data": {"message": "Session not found: ses_nope"},
    }


async def test_hold_and_release_and_a_time_limited_fault() -> None:
    with FakeOpenCode() as server:
        async with OpenCodeBackend(server.url, timeout=5) as backend:
            sid = (await backend.create_session())["id"]
            await backend.prompt_async(sid, PromptRequest(text="wait [hold]"))
            await until(lambda: backend_busy(server, sid), timeout=5)
            server.release()
            await until(lambda: backend_idle(server, sid), timeout=5)

            server.add_fault("/session/status", "status", seconds=0.5, status=503)
            async with httpx.AsyncClient(base_url=server.url) as client:
                assert (await client.get("/session/status")).status_code == 503
                await asyncio.sleep(0.7)
                assert (await client.get("/session/status")).status_code == 200
            assert server.fault_stats()[0]["hits"] == 1


def backend_busy(server: FakeOpenCode, sid: str) -> bool:
    return sid in server.call(lambda b: b.status())


def backend_idle(server: FakeOpenCode, sid: str) -> bool:
    return not backend_busy(server, sid)


def test_process_mode_shares_one_server_and_takes_faults_over_http() -> None:
    with FakeOpenCodeProcess() as server:
        assert server.process is not None
        pid = server.process.pid
        sid = httpx.post(f"{server.url}/session", json={"title": "x"}).json()["id"]
        assert httpx.get(f"{server.url}/session/{sid}").json()["title"] == "x"
        server.add_fault(r"/session/[^/]+$", "html404", count=1, method="GET")
        first = httpx.get(f"{server.url}/session/{sid}")
        assert first.status_code == 404
        assert first.headers["content-type"] == "text/html; charset=utf-8"
        assert httpx.get(f"{server.url}/session/{sid}").status_code == 200
        assert [f["hits"] for f in server.fault_stats()] == [1]
        server.clear_faults()
        assert server.fault_stats() == []
        process = server.process
    assert process.poll() is not None, f"fake server {pid} still running"
