"""The event hub: order, snapshot, Last-Event-ID resume, heartbeats, bounded subscribers and
buffers (the SSE bytes as a client reads them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from asyncagents.service.api import DashboardApi
from asyncagents.service.event_size import (
    EVENT_MAX_BYTES,
    EVENT_TEXT_CHARS,
    SNAPSHOT_TASK_BYTES,
)
from asyncagents.service.event_stream import (
    EventHub,
    HubEvent,
    Subscription,
    TooManySubscribersError,
)
from asyncagents.tasks import Task, TaskManager, TaskProgress, TaskStatus
from asyncagents.tasks.models import now_ms
from asyncagents.tasks.queries import TaskChanges
from dash_support import TOKEN, FakeSource, Script, make_task
from polling import until as wait_for
from starlette.applications import Starlette
from starlette.requests import Request

Event = tuple[str | None, str, Any]  # id, kind, data (None for a heartbeat)


def parse(chunk: bytes) -> Event | None:
    """One SSE block: (id, event, JSON data); ("", "heartbeat", None) for a comment; None for
    the ``retry`` line."""
    text = chunk.decode()
    assert text.endswith("\n\n"), text
    fields: dict[str, str] = {}
    for line in text.strip("\n").split("\n"):
        if line.startswith(":"):
            return ("", "heartbeat", None)
        name, _, value = line.partition(": ")
        fields[name] = value
    if set(fields) == {"retry"}:
        return None
    return fields.get("id"), fields["event"], json.loads(fields["data"])


class Reader:
    """Reads a hub stream event by event, with a deadline per event."""

    def __init__(self, hub: EventHub, sub: Subscription, tasks: Sequence[Task] = ()) -> None:
        self.snapshot_calls = 0
        self._tasks = list(tasks)
        self.gen: AsyncIterator[bytes] = hub.stream(sub, self._snapshot)

    async def _snapshot(self) -> list[Task]:
        self.snapshot_calls += 1
        await asyncio.sleep(0)
        return self._tasks

    async def next(self, timeout: float = 5.0) -> Event:
        while True:
            event = parse(await asyncio.wait_for(self.gen.__anext__(), timeout))
            if event is not None:
                return event

    async def take(self, n: int) -> list[Event]:
        return [await self.next() for _ in range(n)]

    async def ended(self, timeout: float = 5.0) -> bool:
        try:
            while True:
                await asyncio.wait_for(self.gen.__anext__(), timeout)
        except StopAsyncIteration:
            return True


@pytest.fixture
def source() -> FakeSource:
    return FakeSource()


def hub_on(source: FakeSource, **kw: Any) -> EventHub:
    hub = EventHub(first_id=100, **kw)
    hub.attach(source)
    return hub


async def test_snapshot_first_then_every_change_in_order(source: FakeSource) -> None:
    hub = hub_on(source)
    existing = make_task(1, status=TaskStatus.COMPLETED, result="ok")
    reader = Reader(hub, hub.subscribe(), [existing])
    first = await reader.next()
    assert first[0] == "100" and first[1] == "snapshot"
    assert [t["id"] for t in first[2]["tasks"]] == ["tsk_0001"]
    assert first[2]["tasks"][0]["result"] == "ok"
    assert first[2]["heartbeat_ms"] == 15000
    task = make_task(2)
    kinds = [
        "task.created",
        "task.updated",
        "task.completed",
        "task.resumed",
        "task.error",
        "task.cancelled",
        "task.cleared",
    ]
    for kind in kinds:
        source.emit(kind, task)
    events = await reader.take(len(kinds))
    assert [e[1] for e in events] == kinds
    assert [e[0] for e in events] == [str(i) for i in range(101, 101 + len(kinds))]
    assert all(e[2]["id"] == "tsk_0002" and e[2]["label"] == "tsk_0002" for e in events)
    hub.detach()
    assert source.listeners == []
    assert await reader.ended()


async def test_changes_during_the_snapshot_follow_it(source: FakeSource) -> None:
    hub = hub_on(source)
    gate = asyncio.Event()

    async def slow_snapshot() -> list[Task]:
        await gate.wait()
        return [make_task(1)]

    gen = hub.stream(hub.subscribe(), slow_snapshot)
    assert parse(await gen.__anext__()) is None  # retry
    pending = asyncio.ensure_future(gen.__anext__())
    await asyncio.sleep(0.01)
    source.emit("task.updated", make_task(1, description="changed"))
    gate.set()
    snapshot = parse(await pending)
    assert snapshot is not None and snapshot[:2] == ("100", "snapshot")
    update = parse(await gen.__anext__())
    assert update is not None
    assert update[:2] == ("101", "task.updated")
    assert update[2]["description"] == "changed"
    await gen.aclose()
    assert hub.subscriber_count == 0


async def test_last_event_id_resumes_without_gaps_or_duplicates(source: FakeSource) -> None:
    hub = hub_on(source)
    first = Reader(hub, hub.subscribe())
    await first.next()  # snapshot
    for n in range(1, 6):
        source.emit("task.created", make_task(n))
    got = await first.take(2)
    last_seen = got[-1][0]
    assert last_seen == "102"
    await first.gen.aclose()  # the client disconnects; the world moves on
    for n in range(6, 8):
        source.emit("task.created", make_task(n))
    again = Reader(hub, hub.subscribe(last_seen))
    resumed = await again.take(5)
    assert [e[0] for e in resumed] == ["103", "104", "105", "106", "107"]
    assert [e[2]["id"] for e in resumed] == [f"tsk_{n:04d}" for n in range(3, 8)]
    assert again.snapshot_calls == 0
    source.emit("task.completed", make_task(7))
    assert (await again.next())[:2] == ("108", "task.completed")
    # up to date: nothing to replay, no snapshot
    current = Reader(hub, hub.subscribe("108"))
    source.emit("task.updated", make_task(7))
    assert (await current.next())[:2] == ("109", "task.updated")
    assert current.snapshot_calls == 0


@pytest.mark.parametrize(
    "last",
    [
        "101",
        "5",
        "999999",
        "abc",
        "",
        "-3",
        "²",
        "٣",
        pytest.param("1" * 5000, id="5000-digits"),
        "9" * 25,
        "1\x00",
        "1 2",
    ],
)
async def test_unknown_or_too_old_ids_get_a_fresh_snapshot(source: FakeSource, last: str) -> None:
    hub = hub_on(source, ring_size=3)
    for n in range(1, 7):  # ids 101..106; the ring keeps 104..106
        source.emit("task.created", make_task(n))
    reader = Reader(hub, hub.subscribe(last), [make_task(1)])
    event = await reader.next()
    assert event[:2] == ("106", "snapshot")
    assert reader.snapshot_calls == 1
    # the oldest id still resumable is the one just before the ring's first event
    resumable = Reader(hub, hub.subscribe("103"))
    assert [e[0] for e in await resumable.take(3)] == ["104", "105", "106"]


async def test_heartbeats_while_quiet(source: FakeSource) -> None:
    hub = hub_on(source, heartbeat=0.05)
    reader = Reader(hub, hub.subscribe())
    assert (await reader.next())[1] == "snapshot"
    assert await reader.next() == ("", "heartbeat", None)
    assert await reader.next() == ("", "heartbeat", None)
    source.emit("task.updated", make_task(1))
    assert (await reader.next())[:2] == ("101", "task.updated")


async def test_subscribers_are_bounded(source: FakeSource) -> None:
    hub = hub_on(source, max_subscribers=2)
    subs = [hub.subscribe(), hub.subscribe()]
    with pytest.raises(TooManySubscribersError, match="already has 2 subscribers"):
        hub.subscribe()
    hub.unsubscribe(subs[0])
    hub.subscribe()
    assert hub.subscriber_count == 2


async def test_a_slow_subscriber_is_dropped_and_resumes(source: FakeSource) -> None:
    hub = hub_on(source, buffer_size=3)
    slow = Reader(hub, hub.subscribe("100"))
    fast = Reader(hub, hub.subscribe("100"))
    source.emit("task.created", make_task(1))
    assert (await slow.next())[0] == "101"
    assert (await fast.next())[0] == "101"
    for n in range(2, 12):  # the slow one reads nothing now; the fast one keeps up
        source.emit("task.updated", make_task(n))
        assert (await fast.next())[0] == str(100 + n)
    assert hub.dropped_count == 1
    # its connection is still open: it keeps its place among max_subscribers until it ends
    assert hub.subscriber_count == 2
    assert await slow.ended()
    assert hub.subscriber_count == 1
    # the dropped client reconnects with the last id it read: nothing lost, nothing twice
    back = Reader(hub, hub.subscribe("101"))
    assert [e[0] for e in await back.take(10)] == [str(i) for i in range(102, 112)]


async def test_events_route_refuses_beyond_the_limit(manager: TaskManager) -> None:
    api = DashboardApi(manager, token=TOKEN, hub=EventHub(max_subscribers=1))
    api.hub.subscribe()  # the one allowed stream is taken
    transport = httpx.ASGITransport(app=Starlette(routes=api.routes))
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as http:
        response = await http.get("/v1/events", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 503
    assert response.json() == {
        "error": "too_many_subscribers",
        "detail": "the event stream already has 1 subscribers",
    }
    api.close()


def test_hub_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        EventHub(buffer_size=0)


async def test_events_cut_long_texts_and_name_them(source: FakeSource) -> None:
    hub = hub_on(source)
    long_result = "é" * (EVENT_TEXT_CHARS + 5)
    reader = Reader(hub, hub.subscribe(), [make_task(1, result=long_result)])
    snapshot = await reader.next()
    [task] = snapshot[2]["tasks"]
    # in a snapshot a task has 16 KiB: 4,000 "é" (6 bytes each as JSON) are cut further
    assert long_result.startswith(task["result"])
    assert 2000 < len(task["result"]) < EVENT_TEXT_CHARS
    assert len(json.dumps(task, separators=(",", ":"))) <= SNAPSHOT_TASK_BYTES
    assert task["truncated"] == ["result"]
    assert task["prompt"] == "prompt 1"
    source.emit("task.error", make_task(2, prompt="p" * 9000, error="short", result=long_result))
    event = await reader.next()
    assert event[2]["prompt"] == "p" * EVENT_TEXT_CHARS
    assert event[2]["result"] == "é" * EVENT_TEXT_CHARS
    assert event[2]["error"] == "short"
    assert event[2]["truncated"] == ["prompt", "result"]


async def test_reconcile_publishes_what_no_listener_reported(source: FakeSource) -> None:
    hub = hub_on(source)
    old = make_task(1, status=TaskStatus.COMPLETED)
    assert hub.reconcile([old], seed=True) == 0  # the snapshot shows it
    reader = Reader(hub, hub.subscribe(str(hub.last_id)))
    running = make_task(2)
    done_elsewhere = make_task(3, status=TaskStatus.ERROR, error="boom")
    assert hub.reconcile([old, running, done_elsewhere]) == 2
    assert [(e[1], e[2]["id"]) for e in await reader.take(2)] == [
        ("task.created", "tsk_0002"),
        ("task.error", "tsk_0003"),
    ]
    # a change the listener reported is not published again
    cancelled = make_task(2, status=TaskStatus.CANCELLED, updated_at=running.updated_at + 5)
    source.emit("task.cancelled", cancelled)
    assert (await reader.next())[1] == "task.cancelled"
    assert hub.reconcile([old, cancelled, done_elsewhere]) == 0
    # newer without a new status: updated; resumed; gone: cleared
    touched = make_task(3, status=TaskStatus.ERROR, updated_at=done_elsewhere.updated_at + 1)
    resumed = make_task(1, status=TaskStatus.RESUMED, resume_count=1, updated_at=old.updated_at + 9)
    assert hub.reconcile([resumed, touched]) == 3
    events = await reader.take(3)
    assert [(e[1], e[2]["id"]) for e in events] == [
        ("task.resumed", "tsk_0001"),
        ("task.updated", "tsk_0003"),
        ("task.cleared", "tsk_0002"),
    ]
    assert events[0][2]["label"] == "tsk_0001 (resumed)"
    assert hub.reconcile([resumed, touched]) == 0


async def test_a_real_managers_changes_arrive_through_its_listener(
    manager: TaskManager, parent: str
) -> None:
    api = DashboardApi(manager, token=TOKEN, poll_interval=None)  # the listener alone
    reader = Reader(api.hub, api.hub.subscribe(str(api.hub.last_id)))
    task = await manager.task(parent, "Count the files [tool]", "general", "Count")
    events = [await reader.next()]
    while events[-1][1] != "task.completed":
        events.append(await reader.next())
    assert events[0][1:] == ("task.created", events[0][2])
    assert events[0][2]["status"] == "running"
    assert {e[2]["id"] for e in events} == {task.id}
    assert events[-1][2]["result"] == "Done: Count the files [tool]"
    assert events[-1][2]["progress"]["tool_calls"] == 2
    ids = [int(e[0]) for e in events]
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    held = await manager.task(parent, "Wait [hold:x]", "general", "w")
    await manager.cancel(held.id)
    kinds: list[str] = []
    while "task.cancelled" not in kinds:
        kinds.append((await reader.next())[1])
    assert kinds[0] == "task.created"
    api.close()


async def test_snapshots_and_store_changes_keep_the_reported_progress(source: FakeSource) -> None:
    hub = hub_on(source)
    stored = make_task(1)  # the store keeps a run's progress only when its turn ends
    progressed = make_task(1, progress=TaskProgress(tool_calls=3, last_tool="bash"))
    source.emit("task.updated", progressed)
    reader = Reader(hub, hub.subscribe(), [stored])
    snapshot = await reader.next()
    assert snapshot[2]["tasks"][0]["progress"]["last_tool"] == "bash"
    assert hub.with_live_progress(stored).progress.tool_calls == 3
    # a change found in the store (newer, same status) keeps the progress too
    assert hub.reconcile([stored.model_copy(update={"updated_at": stored.updated_at + 1})]) == 1
    event = await reader.next()
    assert event[1] == "task.updated" and event[2]["progress"]["tool_calls"] == 3
    # once the turn has ended, the stored progress is the truth
    ended = make_task(1, status=TaskStatus.COMPLETED, updated_at=stored.updated_at + 2)
    source.emit("task.completed", ended)
    assert hub.with_live_progress(ended).progress.tool_calls == 0
    assert hub.with_live_progress(stored).progress.tool_calls == 0


async def test_a_client_gone_before_the_first_byte_frees_its_slot(manager: TaskManager) -> None:
    api = DashboardApi(manager, token=TOKEN, poll_interval=None)
    app = Starlette(routes=api.routes)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/v1/events",
        "raw_path": b"/v1/events",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        raise OSError("the client has gone")

    with pytest.raises(Exception):  # noqa: B017 (Starlette's ClientDisconnect or the OSError)
        await app(scope, receive, send)
    assert api.hub.subscriber_count == 0
    api.close()


async def test_a_read_older_than_a_reported_change_does_not_step_the_stream_back(
    source: FakeSource,
) -> None:
    hub = hub_on(source)
    running = make_task(1)
    assert hub.reconcile([running], seed=True) == 0
    reader = Reader(hub, hub.subscribe(str(hub.last_id)))
    # the poll begins to read the store; a cancel is reported before the read returns
    read_from = hub.last_id
    cancelled = make_task(1, status=TaskStatus.CANCELLED, updated_at=running.updated_at + 5)
    source.emit("task.cancelled", cancelled)
    event = await reader.next()
    assert (event[1], event[2]["status"]) == ("task.cancelled", "cancelled")
    assert hub.reconcile([running], read_from=read_from) == 0  # not "running" again
    assert hub.reconcile([cancelled]) == 0  # the next read agrees with the stream
    # a task created during a read is not cleared by it; one cleared is not brought back
    read_from = hub.last_id
    created = make_task(2)
    source.emit("task.created", created)
    source.emit("task.cleared", cancelled)
    assert [(e[1], e[2]["id"]) for e in await reader.take(2)] == [
        ("task.created", "tsk_0002"),
        ("task.cleared", "tsk_0001"),
    ]
    assert hub.reconcile([cancelled], read_from=read_from) == 0
    assert hub.reconcile([created]) == 0
    # a later read that shows a change nobody reported still publishes it
    ended = make_task(2, status=TaskStatus.COMPLETED, updated_at=created.updated_at + 1)
    assert hub.reconcile([ended]) == 1
    assert [(e[1], e[2]["id"]) for e in await reader.take(1)] == [("task.completed", "tsk_0002")]


async def test_progress_events_count_each_call_once_and_carry_the_task_as_stored(
    manager: TaskManager, parent: str, script: Script
) -> None:
    api = DashboardApi(manager, token=TOKEN, poll_interval=None)
    reader = Reader(api.hub, api.hub.subscribe(str(api.hub.last_id)))
    task = await manager.task(parent, "Count the files [tool] [hold:count]", "general", "Count")
    events = [await reader.next()]
    while events[-1][2]["progress"]["tool_calls"] < 2:
        events.append(await reader.next())
    script.release("count")
    while events[-1][1] != "task.completed":
        events.append(await reader.next())
    shown = [(e[1], e[2]["updated_at"], e[2]["progress"]["tool_calls"]) for e in events]
    # the count only grows, one event per new count; no event steps back to an older copy
    counts = [c for kind, _, c in shown if kind == "task.updated" and c]
    assert counts == sorted(set(counts)) and counts[-1] == 2, shown
    assert [s for _, s, _ in shown] == sorted(s for _, s, _ in shown), shown
    stored = await manager.store.get(task.id)
    assert stored is not None and stored.progress.tool_calls == 2
    started = [e[2]["turn_started_at"] for e in events if e[2]["progress"]["tool_calls"]]
    assert started == [stored.turn_started_at] * len(started), shown
    api.close()


async def test_streams_opened_at_once_start_one_store_poll(
    manager: TaskManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = DashboardApi(manager, token=TOKEN, poll_interval=0.05)
    app = Starlette(routes=api.routes)
    read = api._read_changes

    async def slow_read(since: int) -> TaskChanges:  # a store read takes a while
        await asyncio.sleep(0.01)
        return await read(since)

    monkeypatch.setattr(api, "_read_changes", slow_read)

    def request() -> Request:
        return Request(
            {
                "type": "http",
                "method": "GET",
                "path": "/v1/events",
                "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
                "query_string": b"",
                "app": app,
            }
        )

    def polls() -> list[asyncio.Task[Any]]:
        return [
            t
            for t in asyncio.all_tasks()
            if t.get_coro().__qualname__ == "DashboardApi._poll" and not t.done()  # type: ignore[union-attr]
        ]

    await asyncio.gather(api.events(request()), api.events(request()), api.events(request()))
    assert len(polls()) == 1
    await asyncio.sleep(0.2)  # it seeded, then compared a few times
    assert len(polls()) == 1
    api.close()
    await asyncio.sleep(0.1)
    assert polls() == []


async def test_the_poll_reads_other_writers_changes_and_clears_not_every_task(
    manager: TaskManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that bypass this manager (another process on the store) reach the stream through
    `changed_since`; the store is never listed whole; the overlap of polls publishes each
    change once."""
    api = DashboardApi(manager, token=TOKEN, poll_interval=0.05)
    store = manager.store
    reads: list[int] = []
    read = api._read_changes

    async def counted(since: int) -> TaskChanges:
        reads.append(since)
        return await read(since)

    async def never(*args: Any, **kw: Any) -> list[Task]:
        raise AssertionError("the poll listed every task")

    monkeypatch.setattr(api, "_read_changes", counted)
    monkeypatch.setattr(store, "list_tasks", never)
    old = make_task(1, status=TaskStatus.COMPLETED)  # changed long before the service began
    old.backend = manager.backend_name
    await store.insert(old)
    app = Starlette(routes=api.routes)
    await api.events(
        Request(
            {
                "type": "http",
                "method": "GET",
                "path": "/v1/events",
                "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
                "query_string": b"",
                "app": app,
            }
        )
    )
    await wait_for(lambda: len(reads) >= 2, 5, "two polls")
    reader = Reader(api.hub, api.hub.subscribe(str(api.hub.last_id)))
    elsewhere = make_task(2, updated_at=now_ms(), parent_session_id="ses_elsewhere")
    elsewhere.backend = manager.backend_name
    await store.insert(elsewhere)
    assert (await reader.next())[1:] == ("task.created", (await reader_payload(api, elsewhere)))
    done = elsewhere.model_copy(
        update={"status": TaskStatus.COMPLETED, "result": "ok", "updated_at": now_ms() + 1}
    )
    assert await store.update(elsewhere.id, lambda t: (done, None)) is not None
    event = await reader.next()
    assert (event[1], event[2]["id"], event[2]["result"]) == ("task.completed", done.id, "ok")
    await store.delete_parent("ses_elsewhere", backend=manager.backend_name)
    assert (await reader.next())[1:] == ("task.cleared", {"id": done.id, "truncated": []})
    polls = len(reads)
    await wait_for(lambda: len(reads) >= polls + 3, 5, "three more polls")
    with pytest.raises(TimeoutError):  # every change once, though the polls overlap
        await reader.next(timeout=0.2)
    assert all(since > old.updated_at for since in reads)  # old tasks are never read again
    api.close()


async def reader_payload(api: DashboardApi, task: Task) -> dict[str, Any]:
    from asyncagents.service.event_stream import event_task_json

    return event_task_json(api.hub.with_live_progress(task))


#: 12 bytes as JSON (an escaped surrogate pair)
SMILE = "\U0001f600"


def _wire(event: HubEvent) -> int:
    return len(event.encode())


@pytest.mark.parametrize("chars", [200_000, 1_000_000])
async def test_a_huge_description_makes_a_small_event(source: FakeSource, chars: int) -> None:
    hub = hub_on(source)
    description = "d" * chars
    source.emit("task.created", make_task(1, description=description))
    [event] = list(hub._ring)
    assert _wire(event) <= EVENT_MAX_BYTES
    data = json.loads(event.data)
    assert data["description"] == "d" * EVENT_TEXT_CHARS
    assert data["truncated"] == ["description"]
    assert data["prompt"] == "prompt 1" and data["id"] == "tsk_0001"


async def test_every_text_field_is_cut_on_code_points_within_64_kib(source: FakeSource) -> None:
    hub = hub_on(source)
    # astral characters: 4 bytes in UTF-8, 12 as JSON escapes (a surrogate pair)
    big = "\U0001f600" * 50_000
    texts = {
        "parent_session_id": "ses_" + big,
        "session_id": "ses_" + big,
        "prompt": big,
        "agent": big,
        "description": "é" + big,
        "turn_after_message_id": big,
        "last_prompt": big,
        "result": big,
        "error": big,
        "backend": big,
        "owner": big,
    }
    task = make_task(1, progress=TaskProgress(tool_calls=3, last_tool=big), **texts)
    source.emit("task.completed", task)
    [event] = list(hub._ring)
    assert _wire(event) <= EVENT_MAX_BYTES
    assert _wire(event) > EVENT_MAX_BYTES - 4096  # cut to fit, not emptied
    data = json.loads(event.data)
    # root_session_id is the parent's session (a task of a top-level session): cut as well
    expected_cut = {*texts, "progress.last_tool", "root_session_id"}
    assert set(data["truncated"]) == expected_cut
    for name, value in texts.items():
        assert value.startswith(data[name]), name  # a prefix: no code point split
    assert big.startswith(data["progress"]["last_tool"])
    assert data["progress"]["tool_calls"] == 3
    assert data["id"] == "tsk_0001"
    # the same task in a snapshot has 16 KiB
    reader = Reader(hub, hub.subscribe(), [task])
    snapshot = await reader.next()
    [entry] = snapshot[2]["tasks"]
    assert len(json.dumps(entry, separators=(",", ":"))) <= SNAPSHOT_TASK_BYTES
    assert set(entry["truncated"]) == expected_cut
    assert entry["id"] == "tsk_0001"


async def test_a_huge_id_is_cut_last(source: FakeSource) -> None:
    hub = hub_on(source)
    source.emit("task.created", make_task(1, id="tsk_" + "x" * 9000, description="y" * 9000))
    data = json.loads(hub._ring[0].data)
    assert data["id"] == ("tsk_" + "x" * 9000)[:EVENT_TEXT_CHARS]
    assert data["truncated"] == ["id", "description", "label"]


async def test_fork_stats_over_4_kib_are_left_out(source: FakeSource) -> None:
    hub = hub_on(source)
    source.emit("task.created", make_task(1, fork_stats={f"k{i}": i for i in range(2000)}))
    source.emit("task.created", make_task(2, fork_stats={"messages": 3}))
    big, small = (json.loads(e.data) for e in hub._ring)
    assert (big["fork_stats"], big["truncated"]) == (None, ["fork_stats"])
    assert (small["fork_stats"], small["truncated"]) == ({"messages": 3}, [])


async def test_the_ring_is_bounded_in_bytes(source: FakeSource) -> None:
    hub = hub_on(source, ring_bytes=200_000)
    for n in range(1, 21):  # 64 KiB each, once cut
        source.emit("task.updated", make_task(n, description=SMILE * 5000, result=SMILE * 5000))
    assert hub.ring_held <= 200_000
    assert [e.id for e in hub._ring] == [118, 119, 120]
    assert hub.ring_held == sum(e.size for e in hub._ring)
    assert all(e.size == len(e.encode()) for e in hub._ring)
    # an id whose followers left the ring: a fresh snapshot
    reader = Reader(hub, hub.subscribe("110"), [make_task(1)])
    assert (await reader.next())[1] == "snapshot"
    resumed = Reader(hub, hub.subscribe("117"))
    assert [e[0] for e in await resumed.take(3)] == ["118", "119", "120"]


async def test_a_subscriber_is_dropped_by_the_bytes_it_has_queued(source: FakeSource) -> None:
    hub = hub_on(source, buffer_bytes=250_000)
    slow = Reader(hub, hub.subscribe("100"))
    fast = Reader(hub, hub.subscribe("100"))
    for n in range(1, 6):  # about 16 KiB each: 5 fit in the slow one's 250,000 bytes
        source.emit("task.updated", make_task(n, description=SMILE * 1300))
        assert (await fast.next())[0] == str(100 + n)
    assert hub.dropped_count == 0
    for n in range(6, 20):  # 64 KiB each
        source.emit("task.updated", make_task(n, description=SMILE * 5000, result=SMILE * 5000))
        assert (await fast.next())[0] == str(100 + n)
    assert hub.dropped_count == 1  # far below the 1,024 events of buffer_size
    assert await slow.ended()
    assert hub.subscriber_count == 1


async def test_a_snapshot_is_bounded_in_bytes_newest_tasks_first(source: FakeSource) -> None:
    hub = hub_on(source, snapshot_bytes=100_000)
    tasks = [make_task(n, description="w" * 20_000) for n in range(30, 0, -1)]  # newest first
    reader = Reader(hub, hub.subscribe(), tasks)
    gen = hub.stream(hub.subscribe(), reader._snapshot)
    assert parse(await gen.__anext__()) is None  # retry
    raw = b""
    while not raw.endswith(b"\n\n"):  # written in pieces of 64 KiB
        piece = await gen.__anext__()
        assert len(piece) <= 64 * 1024
        raw += piece
    await gen.aclose()
    data = raw.split(b"data: ", 1)[1].rstrip(b"\n")
    assert len(data) <= 100_000
    snapshot = json.loads(data)
    shown = [t["id"] for t in snapshot["tasks"]]
    assert shown == [t.id for t in tasks[: len(shown)]]
    assert 5 <= len(shown) < 30
    assert snapshot["omitted"] == 30 - len(shown)
    assert all(
        len(json.dumps(t, separators=(",", ":"))) <= SNAPSHOT_TASK_BYTES for t in snapshot["tasks"]
    )
    # a small set fits whole
    whole = await Reader(hub, hub.subscribe(), tasks[:2]).next()
    assert (len(whole[2]["tasks"]), whole[2]["omitted"]) == (2, 0)


async def test_a_dropped_stream_holds_its_place_until_it_has_ended(source: FakeSource) -> None:
    hub = hub_on(source, buffer_size=2, max_subscribers=1)
    slow = Reader(hub, hub.subscribe("100"))
    for n in range(1, 5):  # never read: dropped at the third
        source.emit("task.updated", make_task(n))
    assert hub.dropped_count == 1
    with pytest.raises(TooManySubscribersError, match="already has 1 subscribers"):
        hub.subscribe()
    assert await slow.ended()  # its response ended: the connection is gone
    assert hub.subscriber_count == 0
    hub.subscribe("101")
