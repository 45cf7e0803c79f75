"""The live event stream of task changes (``GET /v1/events``, Server-Sent Events).

`EventHub` turns the manager's `TaskChange` callbacks into numbered events: it keeps the most
recent ones in a ring buffer and hands each to every subscriber's bounded queue. Publishing never
waits: a subscriber whose queue is full is dropped (its stream ends; the client reconnects with
``Last-Event-ID`` and resumes from the ring). A new subscriber, or one whose ``Last-Event-ID`` is
no longer in the ring (or unknown: another boot of the service), gets a ``snapshot`` of every task
first. Event ids are integers that only increase, also across restarts (they start at the boot
time in microseconds), so a client never mistakes an old id for a new one.

Everything is bounded in bytes as well as in count (see `event_size`): one event, one task in a
snapshot, a snapshot, the ring, and what waits in each subscriber's queue. A dropped subscriber
keeps its place among the `max_subscribers` until its connection has closed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..tasks.models import Task, TaskProgress, TaskStatus
from .event_size import (
    EVENT_TASK_BYTES,
    RING_MAX_BYTES,
    SNAPSHOT_MAX_BYTES,
    SNAPSHOT_TASK_BYTES,
    SUBSCRIBER_MAX_BYTES,
    fit_task,
    json_text,
)
from .event_size import (
    EVENT_TEXT_CHARS as EVENT_TEXT_CHARS,
)

SNAPSHOT = "snapshot"


class TaskChangeLike(Protocol):
    """What the hub reads from a manager's `TaskChange`."""

    @property
    def kind(self) -> str: ...

    @property
    def task(self) -> Task: ...


ChangeListener = Callable[[TaskChangeLike], None]


class ChangeSource(Protocol):
    """A manager that reports every stored change of a task (``add_listener``)."""

    def add_listener(self, callback: ChangeListener) -> None: ...

    def remove_listener(self, callback: ChangeListener) -> None: ...


_END_KINDS = {
    TaskStatus.COMPLETED: "task.completed",
    TaskStatus.ERROR: "task.error",
    TaskStatus.CANCELLED: "task.cancelled",
    TaskStatus.RESUMED: "task.resumed",
}


def inferred_kind(before: TaskStatus | None, task: Task) -> str:
    """The event a stored change shows, from the status before it (None: a new task)."""
    if before is None and task.status is TaskStatus.RUNNING:
        return "task.created"
    if before is task.status:
        return "task.updated"
    return _END_KINDS.get(task.status, "task.updated")


@dataclass(frozen=True)
class _Seen:
    """What the hub last published for a task, and the id of that event."""

    updated_at: int
    #: None: the task was cleared
    status: TaskStatus | None
    event_id: int


class TooManySubscribersError(Exception):
    """The hub already serves `max_subscribers` streams (the route answers 503)."""


#: a usable ``Last-Event-ID``: decimal digits only, no longer than any id this hub gives out
_EVENT_ID = re.compile(r"[0-9]{1,20}")
#: the size of the pieces a snapshot is written in (a slow reader holds back at most one)
_CHUNK_BYTES = 64 * 1024


def task_json(task: Task) -> dict[str, Any]:
    """A task as the API and the events show it: the stored fields plus its marked label."""
    out = task.model_dump(mode="json")
    out["label"] = task.label
    return out


def event_task_json(task: Task, max_bytes: int = EVENT_TASK_BYTES) -> dict[str, Any]:
    """`task_json` with its texts cut so that its JSON fits `max_bytes` (the cut fields are
    named in ``truncated``): an event goes to every subscriber and stays in the ring."""
    return fit_task(task_json(task), max_bytes)


@dataclass(frozen=True)
class HubEvent:
    """One numbered event; `data` is its JSON text (encoded once, sent to every subscriber)."""

    id: int
    kind: str
    #: ASCII JSON (non-ASCII characters escaped), so its length is its size in bytes
    data: str

    def encode(self) -> bytes:
        """The event as SSE lines (``data`` is JSON on one line)."""
        return f"id: {self.id}\nevent: {self.kind}\ndata: {self.data}\n\n".encode()

    @property
    def size(self) -> int:
        """Its size on the wire, in bytes: ``len(self.encode())`` without encoding it."""
        return len(str(self.id)) + len(self.kind) + len(self.data) + 21


@dataclass(eq=False)
class Subscription:
    """One client's stream: its bounded queue and whether the hub dropped it."""

    queue: asyncio.Queue[HubEvent]
    #: the last event id the client has (events after it come from the queue)
    after: int
    #: events to send before the queue (a resume from the ring)
    backlog: list[HubEvent]
    #: True when the client needs a snapshot first (new, or its id is unknown or too old)
    needs_snapshot: bool
    dropped: asyncio.Event = field(default_factory=asyncio.Event)
    #: the bytes of the events in `queue`
    queued_bytes: int = 0

    def taken(self, event: HubEvent) -> HubEvent:
        """Count `event` out of the queue (it is being sent)."""
        self.queued_bytes -= event.size
        return event


class EventHub:
    """Numbered task events for many SSE subscribers; see the module docstring.

    The ring keeps the recent events for resumes, at most `ring_size` of them and
    `ring_bytes` bytes; each subscriber buffers at most `buffer_size` events and `buffer_bytes`
    bytes; at most `max_subscribers` streams are open at once; a comment line goes out every
    `heartbeat` seconds of silence. A snapshot is at most `snapshot_bytes` bytes.
    """

    def __init__(
        self,
        *,
        ring_size: int = 4096,
        ring_bytes: int = RING_MAX_BYTES,
        buffer_size: int = 1024,
        buffer_bytes: int = SUBSCRIBER_MAX_BYTES,
        max_subscribers: int = 100,
        heartbeat: float = 15.0,
        snapshot_bytes: int = SNAPSHOT_MAX_BYTES,
        first_id: int | None = None,
    ) -> None:
        limits = (ring_size, ring_bytes, buffer_size, buffer_bytes, max_subscribers, heartbeat)
        if min(limits) <= 0 or snapshot_bytes <= 0:
            raise ValueError(
                "ring_size, ring_bytes, buffer_size, buffer_bytes, max_subscribers, heartbeat "
                "and snapshot_bytes must be > 0"
            )
        self.ring_size = ring_size
        self.ring_bytes = ring_bytes
        self.buffer_size = buffer_size
        self.buffer_bytes = buffer_bytes
        self.max_subscribers = max_subscribers
        self.heartbeat = heartbeat
        self.snapshot_bytes = snapshot_bytes
        #: the id of the last event published (the first event gets `first_id` + 1)
        self.last_id = time.time_ns() // 1000 if first_id is None else first_id
        self._ring: deque[HubEvent] = deque()
        #: the bytes of the events in the ring
        self.ring_held = 0
        #: every open stream, dropped or not: a dropped one counts until its connection closed
        self._subscribers: set[Subscription] = set()
        self._sources: list[ChangeSource] = []
        #: task id -> what the last event published for it showed (a cleared task: status None,
        #: kept until a reconcile whose read began after it)
        self._seen: dict[str, _Seen] = {}
        #: task id -> the progress last reported for its running turn
        self._progress: dict[str, TaskProgress] = {}
        #: task id -> the tokens and cost last reported for its running turn
        self._usage: dict[str, dict[str, Any]] = {}
        #: how many subscribers were dropped for being too slow
        self.dropped_count = 0
        #: how many snapshots were sent (a resumed stream gets none)
        self.snapshots_sent = 0

    # -- the manager side ---------------------------------------------------------------------

    def attach(self, source: ChangeSource) -> None:
        """Listen to a manager's task changes."""
        source.add_listener(self.on_change)
        self._sources.append(source)

    def drop_all(self) -> None:
        """End every open stream (its client reconnects and resumes with Last-Event-ID)."""
        for sub in list(self._subscribers):
            self._drop(sub)

    def detach(self) -> None:
        """Stop listening, and end every open stream."""
        for source in self._sources:
            source.remove_listener(self.on_change)
        self._sources.clear()
        self.drop_all()

    def on_change(self, change: TaskChangeLike) -> None:
        """The listener: publish one change (called on the loop; never blocks)."""
        task = change.task
        cleared = change.kind == "task.cleared"
        if task.status.active and not cleared:
            self._progress[task.id] = task.progress
            self._usage[task.id] = {
                "usage": task.usage,
                "turn_usage": task.turn_usage,
                "usage_by_model": task.usage_by_model,
            }
        else:
            self._progress.pop(task.id, None)
            self._usage.pop(task.id, None)
        event = self.publish(change.kind, event_task_json(task))
        self._seen[task.id] = _Seen(task.updated_at, None if cleared else task.status, event.id)

    def live_usage_ids(self) -> list[str]:
        """The running tasks whose tokens and cost were reported while they run."""
        return sorted(self._usage)

    def with_live_progress(self, task: Task) -> Task:
        """`task` with the progress (and tokens and cost) its manager last reported while it
        runs: the manager reports a run's tool calls as they happen but stores them when the
        turn ends, and its usage at each check."""
        progress = self._progress.get(task.id)
        if progress is None or not task.status.active:
            return task
        usage = self._usage.get(task.id) or {}
        if usage and usage["usage"].cost < task.usage.cost:
            usage = {}  # the store is newer (another worker counted more since)
        return task.model_copy(update={"progress": progress, **usage})

    def reconcile(
        self, tasks: Sequence[Task], *, seed: bool = False, read_from: int | None = None
    ) -> int:
        """Publish the changes in `tasks` (every stored task) that no listener reported: tasks
        changed by another process sharing the store, or by a manager without listeners.

        A task the hub has not seen is ``task.created`` (or its end, if it has ended); a new
        status gives its event; a newer ``updated_at`` alone is ``task.updated``; a task gone
        is ``task.cleared``. With `seed`, only remember them (the snapshot shows them).

        `read_from` is `last_id` when the read of `tasks` began (default: now). A task with an
        event published since may be older in `tasks` than in that event (a cancel reported
        while the store was read): it is left to the next reconcile, so the stream never steps
        back to an older copy, nor clears a task created during the read.
        Returns how many events were published.
        """
        read_from = self.last_id if read_from is None else read_from
        published = 0
        present = set()
        for task in tasks:
            present.add(task.id)
            published += self._publish_stored(task, seed=seed, read_from=read_from)
        for task_id, seen in list(self._seen.items()):
            if task_id in present or seen.event_id > read_from:
                continue
            if seen.status is None:
                del self._seen[task_id]  # a clear the read already shows: nothing to keep
                continue
            self._progress.pop(task_id, None)
            self._usage.pop(task_id, None)
            if seed:
                del self._seen[task_id]
                continue
            event = self.publish("task.cleared", {"id": task_id, "truncated": []})
            self._seen[task_id] = _Seen(seen.updated_at, None, event.id)
            published += 1
        return published

    def apply_changes(
        self,
        tasks: Sequence[Task],
        cleared: Sequence[str],
        *,
        seed: bool = False,
        read_from: int | None = None,
        forget_before: int | None = None,
    ) -> int:
        """Publish what a read of recent changes shows that no listener reported: `tasks`
        written lately (by any process sharing the store) and the ids of tasks `cleared`.

        Unlike `reconcile`, the read holds only what changed, not every task: a task not in it
        is unchanged. The same change read twice (polls overlap, to allow for clock skew
        between hosts) is published once. With `seed`, only remember them. `read_from`: as in
        `reconcile`. Tasks last seen before `forget_before` (ms) are forgotten: a later change
        of one is published anew. Returns how many events were published.
        """
        read_from = self.last_id if read_from is None else read_from
        published = 0
        for task in tasks:
            published += self._publish_stored(task, seed=seed, read_from=read_from)
        for task_id in cleared:
            seen = self._seen.get(task_id)
            if seen is not None and (seen.status is None or seen.event_id > read_from):
                continue
            self._progress.pop(task_id, None)
            # kept from now (this clock) until the reads' window has moved past the clear
            now = time.time_ns() // 1_000_000
            if seed:
                self._seen[task_id] = _Seen(now, None, read_from)
                continue
            event = self.publish("task.cleared", {"id": task_id, "truncated": []})
            self._seen[task_id] = _Seen(now, None, event.id)
            published += 1
        if forget_before is not None:
            for task_id, seen in list(self._seen.items()):
                if seen.event_id <= read_from and seen.updated_at < forget_before:
                    del self._seen[task_id]
        return published

    def _publish_stored(self, task: Task, *, seed: bool, read_from: int) -> bool:
        """Publish the stored copy of a task if it shows a change not published yet."""
        seen = self._seen.get(task.id)
        if seen is not None:
            if seen.event_id > read_from:
                return False
            if seen.status is None:
                seen = None  # cleared before the read, stored again since: new to us
            elif seen.updated_at >= task.updated_at and seen.status is task.status:
                return False
        if not task.status.active:
            self._progress.pop(task.id, None)
        if seed:
            self._seen[task.id] = _Seen(task.updated_at, task.status, read_from)
            return False
        kind = inferred_kind(None if seen is None else seen.status, task)
        event = self.publish(kind, event_task_json(self.with_live_progress(task)))
        self._seen[task.id] = _Seen(task.updated_at, task.status, event.id)
        return True

    def publish(self, kind: str, payload: dict[str, Any]) -> HubEvent:
        """Number an event, keep it in the ring, queue it for every subscriber."""
        self.last_id += 1
        event = HubEvent(self.last_id, kind, json_text(payload))
        self._ring.append(event)
        self.ring_held += event.size
        while len(self._ring) > self.ring_size or (
            self.ring_held > self.ring_bytes and len(self._ring) > 1
        ):
            self.ring_held -= self._ring.popleft().size
        for sub in list(self._subscribers):
            if sub.dropped.is_set():
                continue
            if sub.queued_bytes + event.size > self.buffer_bytes or sub.queue.full():
                self.dropped_count += 1
                self._drop(sub)
                continue
            sub.queue.put_nowait(event)
            sub.queued_bytes += event.size
        return event

    # -- the client side ----------------------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        """Open streams now (a dropped one counts until its connection has closed)."""
        return len(self._subscribers)

    def subscribe(self, last_event_id: str | None = None) -> Subscription:
        """Open a stream; resume after `last_event_id` when the ring still holds what follows.

        Raises `TooManySubscribersError` at the limit.
        """
        if len(self._subscribers) >= self.max_subscribers:
            raise TooManySubscribersError(
                f"the event stream already has {self.max_subscribers} subscribers"
            )
        backlog = self._backlog_after(last_event_id)
        sub = Subscription(
            queue=asyncio.Queue(self.buffer_size),
            after=self.last_id,
            backlog=backlog or [],
            needs_snapshot=backlog is None,
        )
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget a stream whose connection has closed (its place is free again)."""
        self._subscribers.discard(sub)

    def _drop(self, sub: Subscription) -> None:
        """Stop feeding `sub` and tell its response to close the connection; the place stays
        taken until `unsubscribe` (the connection is really gone)."""
        sub.dropped.set()
        while not sub.queue.empty():
            sub.taken(sub.queue.get_nowait())

    def _backlog_after(self, last_event_id: str | None) -> list[HubEvent] | None:
        """The ring's events after `last_event_id`, or None when a snapshot is needed (also
        for an id that is not a number this hub could have given out)."""
        if last_event_id is None or not _EVENT_ID.fullmatch(last_event_id.strip()):
            return None
        after = int(last_event_id.strip())
        if after > self.last_id:
            return None  # an id from a later boot than ours? not ours: start afresh
        if after == self.last_id:
            return []
        if not self._ring or self._ring[0].id > after + 1:
            return None  # the events right after it have left the ring
        return [e for e in self._ring if e.id > after]

    def snapshot_json(self, tasks: Sequence[Task]) -> str:
        """The data of a snapshot: the newest `tasks` (each cut to `SNAPSHOT_TASK_BYTES`) that
        fit in `snapshot_bytes`, and ``omitted``, how many older ones did not fit."""
        tail = {
            "heartbeat_ms": int(self.heartbeat * 1000),
            "now_ms": time.time_ns() // 1_000_000,
            "omitted": len(tasks),
        }
        room = self.snapshot_bytes - len(json_text({"tasks": [], **tail}))
        parts: list[str] = []
        for task in tasks:
            part = json_text(
                event_task_json(self.with_live_progress(task), max_bytes=SNAPSHOT_TASK_BYTES)
            )
            if len(part) + 1 > room:
                break
            room -= len(part) + 1
            parts.append(part)
        tail["omitted"] = len(tasks) - len(parts)
        return '{"tasks":[' + ",".join(parts) + "]," + json_text(tail)[1:]

    async def stream(
        self,
        sub: Subscription,
        snapshot: Callable[[], Awaitable[Sequence[Task]]],
        closing: asyncio.Event | None = None,
    ) -> AsyncIterator[bytes]:
        """The SSE bytes of one subscription: snapshot or backlog, then live events and
        heartbeats, until the client leaves, the hub drops it or `closing` is set (the
        service stops: an open stream must not hold its shutdown)."""
        closing = closing or asyncio.Event()
        try:
            yield f"retry: {int(self.heartbeat * 1000)}\n\n".encode()
            if sub.needs_snapshot:
                self.snapshots_sent += 1
                # numbered as the last event before the subscription: events queued since
                # follow it; a task they change may already show the change (idempotent)
                data = self.snapshot_json(await snapshot()).encode()
                if sub.dropped.is_set():
                    return
                frame = f"id: {sub.after}\nevent: {SNAPSHOT}\ndata: ".encode() + data + b"\n\n"
                for start in range(0, len(frame), _CHUNK_BYTES):
                    yield frame[start : start + _CHUNK_BYTES]
            for event in sub.backlog:
                yield event.encode()
            sub.backlog = []
            while not (sub.dropped.is_set() or closing.is_set()):
                try:
                    event = sub.taken(sub.queue.get_nowait())
                except asyncio.QueueEmpty:
                    pass
                else:
                    yield event.encode()
                    continue
                getter = asyncio.ensure_future(sub.queue.get())
                ended = (
                    asyncio.ensure_future(sub.dropped.wait()),
                    asyncio.ensure_future(closing.wait()),
                )
                try:
                    done, _ = await asyncio.wait(
                        {getter, *ended},
                        timeout=self.heartbeat,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for waiter in ended:
                        waiter.cancel()
                    if not getter.done():
                        getter.cancel()  # a cancelled get leaves its item in the queue
                if getter in done:
                    yield sub.taken(getter.result()).encode()
                    continue
                if not done:
                    yield b": heartbeat\n\n"
            # dropped (too slow), or closed: the client reconnects with Last-Event-ID
        finally:
            self.unsubscribe(sub)
