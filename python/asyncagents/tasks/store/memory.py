"""A dict-backed `TaskStore` for tests and throwaway managers (one process, nothing persisted).

Each method runs without awaiting in between, so on one event loop every call is atomic; a
thread lock also makes it safe to share between threads. Records are copied on the way in and
out, so a caller mutating a returned task never changes the stored one; a copy shares only what
cannot change (`fresh_copy`). Tasks are indexed by parent, by child session, by pending status
and (the queued ones) by parent again, so the calls a new task makes (its parent's depth, its
place in its parent's queue, an admission pass) read those tasks only, not every stored one.
"""

from __future__ import annotations

import bisect
import copy
import enum
import threading
import types
import typing
from collections.abc import Collection, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined as Undefined

from ..admission import FRESH_MS, Caps, Entry, Include, admitted, choose, turn_keys
from ..errors import StoreError
from ..models import Notice, Task, TaskStatus, now_ms
from ..queries import (
    CLEARED_MEMORY_MS,
    TOP_DEFAULT,
    TaskChanges,
    TaskPage,
    TaskQuery,
    TaskStats,
    add_usage,
    has_nul,
    matches,
    sort_key,
    stats_of,
)
from .base import PENDING_STATUSES, Mutation, QueueView, TaskCost
from .rows import seconds_to_ms as _ms

M = TypeVar("M", bound=BaseModel)

#: values that never change in place: shared by a copy and its original (the exact types
#: first: a look-up, before the slower `isinstance` of a subclass, such as an enum)
_SHARED_TYPES = frozenset((str, int, float, bool, type(None)))
_IMMUTABLE = (str, int, float, type(None))
_set = object.__setattr__
#: model class -> its fields whose value may change in place (see `_may_change`)
_CHANGING: dict[type[BaseModel], tuple[str, ...]] = {}


def _may_change(annotation: Any) -> bool:
    """Whether a field of this type may hold a value that changes in place: anything but
    strings, numbers, booleans, None, enums and literals (and unions of them)."""
    if annotation in (str, int, float, bool, type(None)):
        return False
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return False
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return False
    if origin in (typing.Union, types.UnionType):
        return any(_may_change(arg) for arg in typing.get_args(annotation))
    return True


def _changing_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    fields = _CHANGING.get(cls)
    if fields is None:
        fields = tuple(n for n, f in cls.model_fields.items() if _may_change(f.annotation))
        _CHANGING[cls] = fields
    return fields


def _fresh(value: Any) -> Any:
    kind = type(value)
    if kind in _SHARED_TYPES:
        return value
    if kind is dict:
        return {key: _fresh(item) for key, item in value.items()}
    if kind is list:
        return [_fresh(item) for item in value]
    if isinstance(value, BaseModel):
        return fresh_copy(value)
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, tuple):
        return tuple(_fresh(item) for item in value)
    return copy.deepcopy(value)


def _shallow(model: M) -> M:
    """`model.__copy__()` without its generic dispatch (half the time, on these small models):
    a new instance with copies of its field values' dict, its fields set, extra and private
    values."""
    cls = type(model)
    new = cls.__new__(cls)
    _set(new, "__dict__", model.__dict__.copy())
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__.copy())
    extra = model.__pydantic_extra__
    _set(new, "__pydantic_extra__", None if extra is None else extra.copy())
    private = getattr(model, "__pydantic_private__", None)
    _set(
        new,
        "__pydantic_private__",
        None if private is None else {k: v for k, v in private.items() if v is not Undefined},
    )
    return new


def fresh_copy(model: M) -> M:
    """A copy of `model` that shares nothing a caller could change with it (as a deep copy),
    at a fraction of its cost: fields typed as strings, numbers, enums and the like are shared;
    only models, dicts, lists and other containers are copied, recursively."""
    new = _shallow(model)
    values = new.__dict__
    for name in _changing_fields(type(model)):
        value = values[name]
        if type(value) not in _SHARED_TYPES:
            values[name] = _fresh(value)
    return new


class InMemoryTaskStore:
    """`TaskStore` in dicts: tasks, leases (owner -> expiry ms), notices, queue turns."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tasks: dict[str, Task] = {}
        self._notices: dict[str, Notice] = {}
        self._leases: dict[str, tuple[str, int]] = {}
        #: cleared task id -> (backend, when)
        self._cleared: dict[str, tuple[str, int]] = {}
        #: (backend, parent) -> key of the parent's last admission
        self._turns: dict[tuple[str, str], int] = {}
        #: indexes of `_tasks` (kept by `_put` and `_remove`): task ids by parent session, by
        #: child session, the ids of the pending (queued or running) tasks, and the queued ones
        #: by parent session
        self._by_parent: dict[str, set[str]] = {}
        self._by_session: dict[str, set[str]] = {}
        self._pending: set[str] = set()
        #: the queue order keys (created_at, id) of the queued tasks, sorted, by backend and
        #: parent session: a place in a parent's queue is a binary search
        self._queued: dict[tuple[str, str], list[tuple[int, str]]] = {}

    def _put(self, task: Task) -> None:
        """Store `task` (the store's own copy) under its id, and index it."""
        old = self._tasks.get(task.id)
        self._tasks[task.id] = task
        if old is not None and old.parent_session_id != task.parent_session_id:
            _unindex(self._by_parent, old.parent_session_id, task.id)
        self._by_parent.setdefault(task.parent_session_id, set()).add(task.id)
        if old is not None and old.session_id and old.session_id != task.session_id:
            _unindex(self._by_session, old.session_id, task.id)
        if task.session_id:
            self._by_session.setdefault(task.session_id, set()).add(task.id)
        if task.status in PENDING_STATUSES:
            self._pending.add(task.id)
        else:
            self._pending.discard(task.id)
        if old is not None and old.status is TaskStatus.QUEUED:
            self._unqueue(old)
        if task.status is TaskStatus.QUEUED:
            keys = self._queued.setdefault((task.backend, task.parent_session_id), [])
            bisect.insort(keys, (task.created_at, task.id))

    def _remove(self, task_id: str) -> Task:
        task = self._tasks.pop(task_id)
        _unindex(self._by_parent, task.parent_session_id, task_id)
        if task.session_id:
            _unindex(self._by_session, task.session_id, task_id)
        self._pending.discard(task_id)
        if task.status is TaskStatus.QUEUED:
            self._unqueue(task)
        return task

    def _unqueue(self, task: Task) -> None:
        where = (task.backend, task.parent_session_id)
        keys = self._queued.get(where, [])
        key = (task.created_at, task.id)
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            del keys[at]
            if not keys:
                del self._queued[where]

    def _of_parent(self, parent_session_id: str) -> Iterable[Task]:
        return [self._tasks[i] for i in self._by_parent.get(parent_session_id, ())]

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def insert(self, task: Task) -> None:
        with self._lock:
            if task.id in self._tasks:
                raise StoreError(f"Cannot insert task {task.id} in memory: the id exists")
            self._put(fresh_copy(task))

    async def get(self, task_id: str) -> Task | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return None if task is None else fresh_copy(task)

    async def ids_with_prefix(
        self, prefix: str, parent_session_id: str | None = None, limit: int = 2
    ) -> list[str]:
        with self._lock:
            ids = sorted(
                t.id
                for t in self._tasks.values()
                if t.id.startswith(prefix)
                and (parent_session_id is None or t.parent_session_id == parent_session_id)
            )
        return ids[: max(limit, 0)]

    async def update(self, task_id: str, mutate: Mutation) -> tuple[Task, Notice | None] | None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            out = mutate(fresh_copy(task))
            if out is None:
                return None
            new, notice = out
            self._put(fresh_copy(new))
            if notice is not None:
                self._notices[notice.id] = notice.model_copy()
            return new, notice

    async def list_tasks(
        self,
        parent_session_id: str | None = None,
        statuses: Collection[TaskStatus] | None = None,
        *,
        backend: str | None = None,
        owner: str | None = None,
    ) -> list[Task]:
        with self._lock:
            candidates = (
                self._tasks.values()
                if parent_session_id is None
                else self._of_parent(parent_session_id)
            )
            tasks = [
                fresh_copy(t)
                for t in candidates
                if (statuses is None or t.status in statuses)
                and (backend is None or t.backend == backend)
                and (owner is None or t.owner == owner)
            ]
        tasks.sort(key=lambda t: (t.created_at, t.id), reverse=True)
        return tasks

    async def find_by_session(self, session_id: str) -> Task | None:
        with self._lock:
            found = [self._tasks[i] for i in self._by_session.get(session_id, ())]
            if not found:
                return None
            return fresh_copy(max(found, key=lambda t: (t.created_at, t.id)))

    async def delete_parent(self, parent_session_id: str, backend: str | None = None) -> list[Task]:
        def doomed(parent: str, of_backend: str) -> bool:
            return parent == parent_session_id and (backend is None or of_backend == backend)

        with self._lock:
            gone = [
                t
                for t in self._of_parent(parent_session_id)
                if doomed(t.parent_session_id, t.backend)
            ]
            now = now_ms()
            for task in gone:
                self._remove(task.id)
                self._cleared[task.id] = (task.backend, now)
            for task_id, (_, at) in list(self._cleared.items()):
                if at < now - CLEARED_MEMORY_MS:
                    del self._cleared[task_id]
            for notice in list(self._notices.values()):
                if doomed(notice.parent_session_id, notice.backend):
                    del self._notices[notice.id]
            for of_backend, parent in list(self._turns):
                if doomed(parent, of_backend):
                    del self._turns[(of_backend, parent)]
        gone.sort(key=lambda t: (t.created_at, t.id), reverse=True)
        return gone

    async def query_tasks(self, query: TaskQuery) -> TaskPage:
        if query.matches_nothing:
            return query.empty_page()
        with self._lock:
            found = [t for t in self._tasks.values() if matches(t, query)]
            ordered = sorted(
                found, key=lambda t: (sort_key(t, query.sort), t.id), reverse=query.descending
            )
            if query.after is not None:
                mark = query.after

                def after(t: Task) -> bool:
                    key = (sort_key(t, query.sort), t.id)
                    return key < mark if query.descending else key > mark

                ordered = [t for t in ordered if after(t)]
            page = [fresh_copy(t) for t in ordered[: query.limit]]
        more = len(ordered) > query.limit
        last = page[-1] if page and more else None
        return TaskPage(
            tasks=page,
            total=len(found) if query.count else None,
            usage=add_usage(found) if query.count else None,
            next_after=None if last is None else (sort_key(last, query.sort), last.id),
        )

    async def task_stats(
        self, backend: str, parent_session_id: str | None = None, top: int = TOP_DEFAULT
    ) -> TaskStats:
        if has_nul(backend, parent_session_id):
            return stats_of([])
        with self._lock:
            tasks = [
                t
                for t in self._tasks.values()
                if t.backend == backend
                and (parent_session_id is None or t.parent_session_id == parent_session_id)
            ]
            return stats_of(tasks, top)

    async def changed_since(self, backend: str, since: int) -> TaskChanges:
        if has_nul(backend):
            return TaskChanges(tasks=[], cleared=[])
        with self._lock:
            tasks = sorted(
                (
                    fresh_copy(t)
                    for t in self._tasks.values()
                    if t.backend == backend and t.updated_at >= since
                ),
                key=lambda t: (t.updated_at, t.id),
            )
            cleared = sorted(
                (at, task_id)
                for task_id, (of, at) in self._cleared.items()
                if of == backend and at >= since
            )
        return TaskChanges(tasks=tasks, cleared=[task_id for _, task_id in cleared])

    async def renew_lease(self, owner: str, backend: str, ttl: float) -> None:
        with self._lock:
            self._leases[owner] = (backend, now_ms() + _ms(ttl))

    async def drop_lease(self, owner: str) -> None:
        with self._lock:
            self._leases.pop(owner, None)

    def _lease_live(self, owner: str | None, now: int) -> bool:
        lease = None if owner is None else self._leases.get(owner)
        return lease is not None and lease[1] > now

    async def take_over(self, owner: str, backend: str, limit: int = 500) -> list[Task]:
        with self._lock:
            now = now_ms()
            orphans = sorted(
                (
                    t
                    for t in (self._tasks[i] for i in self._pending)
                    if t.backend == backend
                    and t.owner != owner
                    and not self._lease_live(t.owner, now)
                ),
                key=lambda t: (t.created_at, t.id),
            )[: max(limit, 0)]
            for task in orphans:
                task.owner = owner
            return [fresh_copy(t) for t in orphans]

    def _queue_view(self, backend: str) -> QueueView:
        now = now_ms()
        entries = [
            Entry(
                id=t.id,
                parent=t.parent_session_id,
                agent=t.agent,
                model=t.model,
                created_at=t.created_at,
                running=t.status is not TaskStatus.QUEUED,
                ready=t.ready,
                owner=t.owner,
                owner_live=self._lease_live(t.owner, now),
                not_before=t.retry_at if t.status is TaskStatus.QUEUED else None,
            )
            for t in (self._tasks[i] for i in self._pending)
            if t.backend == backend
        ]
        turns = {parent: key for (of, parent), key in self._turns.items() if of == backend}
        return QueueView(entries=entries, last_admitted=turns)

    async def queue_view(self, backend: str) -> QueueView:
        with self._lock:
            return self._queue_view(backend)

    async def tree_costs(self, parent_session_ids: Collection[str]) -> list[TaskCost]:
        with self._lock:
            return [
                TaskCost(t.id, t.session_id, t.usage.cost)
                for parent in dict.fromkeys(parent_session_ids)
                if not has_nul(parent)
                for t in self._of_parent(parent)
            ]

    async def queued_ahead(self, task: Task) -> int:
        if has_nul(task.backend, task.parent_session_id, task.id):
            return 0
        with self._lock:
            keys = self._queued.get((task.backend, task.parent_session_id), [])
            return bisect.bisect_left(keys, (task.created_at, task.id))

    async def admit(
        self,
        backend: str,
        caps: Caps,
        owner: str,
        limit: int = 100,
        *,
        include: Include = None,
        fresh_ms: int = FRESH_MS,
    ) -> list[Task]:
        with self._lock:
            view = self._queue_view(backend)
            now = now_ms()
            chosen = choose(
                view.entries,
                view.last_admitted,
                caps,
                limit,
                include=include,
                me=owner,
                now=now,
                fresh_ms=fresh_ms,
            )
            out = []
            for entry, key in zip(
                chosen, turn_keys(now, len(chosen), view.last_admitted), strict=True
            ):
                changed = admitted(fresh_copy(self._tasks[entry.id]), owner, now, include)
                if changed is None:
                    continue
                self._put(fresh_copy(changed))
                self._turns[(backend, entry.parent)] = key
                out.append(changed)
            return out

    async def delete_queued(self, task_id: str) -> Task | None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.status is not TaskStatus.QUEUED:
                return None
            self._remove(task_id)
            self._cleared[task_id] = (task.backend, now_ms())
            for notice in list(self._notices.values()):
                if notice.task_id == task_id:
                    del self._notices[notice.id]
            return task

    async def descendants(self, session_id: str) -> list[Task]:
        with self._lock:
            found: dict[str, Task] = {}
            sessions = [session_id]
            seen = {session_id}
            while sessions:
                parent = sessions.pop()
                for task in self._of_parent(parent):
                    if task.id not in found:
                        found[task.id] = fresh_copy(task)
                        if task.session_id and task.session_id not in seen:
                            seen.add(task.session_id)
                            sessions.append(task.session_id)
        return sorted(found.values(), key=lambda t: (t.created_at, t.id))

    async def notices(
        self, parent_session_id: str | None = None, *, backend: str | None = None
    ) -> list[Notice]:
        # a Notice holds only immutable scalars: a shallow copy is a full one
        with self._lock:
            out = [
                n.model_copy()
                for n in self._notices.values()
                if (parent_session_id is None or n.parent_session_id == parent_session_id)
                and (backend is None or n.backend == backend)
            ]
        out.sort(key=lambda n: (n.created_at, n.id))
        return out

    async def claim_notices(
        self,
        owner: str,
        backend: str,
        claim_ttl: float,
        *,
        parent_session_id: str | None = None,
        limit: int = 100,
    ) -> list[Notice]:
        with self._lock:
            now = now_ms()
            due = sorted(
                (
                    n
                    for n in self._notices.values()
                    if n.backend == backend
                    and (parent_session_id is None or n.parent_session_id == parent_session_id)
                    and n.next_attempt_at <= now
                    and (n.claimed_by is None or (n.claim_expires_at or 0) <= now)
                ),
                key=lambda n: (n.created_at, n.id),
            )[: max(limit, 0)]
            for notice in due:
                notice.claimed_by = owner
                notice.claim_expires_at = now + _ms(claim_ttl)
            return [n.model_copy() for n in due]

    async def release_notice(self, notice: Notice) -> None:
        with self._lock:
            stored = self._notices.get(notice.id)
            if stored is None or stored.claimed_by != notice.claimed_by:
                return
            stored.attempts = notice.attempts
            stored.last_error = notice.last_error
            stored.next_attempt_at = notice.next_attempt_at
            stored.claimed_by = None
            stored.claim_expires_at = None

    async def delete_notice(self, notice_id: str) -> None:
        with self._lock:
            self._notices.pop(notice_id, None)


def _unindex(index: dict[str, set[str]], key: str, task_id: str) -> None:
    ids = index.get(key)
    if ids is not None:
        ids.discard(task_id)
        if not ids:
            del index[key]
