"""A burst of new tasks: shared admission passes (a few for many `task()` calls, none missed,
each task admitted once, no cap exceeded), and the queue bound kept exactly when tasks are stored
at once by two managers."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    StoreError,
    Task,
    TaskChange,
    TaskManager,
    TaskStatus,
    TaskStore,
)
from asyncagents.tasks.admission import Caps, Include
from asyncagents.tasks.admitter import Admitter
from asyncagents.tasks.errors import QueueFullError
from asyncagents.tasks.models import now_ms
from polling import until
from test_queue import AGENT, Gates, config, new_session


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def backend(gates: Gates) -> InProcessBackend:
    return InProcessBackend(gates)


class _HeldStore(InMemoryTaskStore):
    """Its `admit` waits for `release` while `hold` is set, and records what each call got."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[frozenset[str]] = []
        self.fail_next = False

    async def admit(
        self, backend: str, caps: Caps, owner: str, limit: int = 100, **kw: Any
    ) -> list[Task]:
        include: Include = kw.get("include")
        self.calls.append(frozenset(() if include is None else include))
        if self.hold.is_set():
            await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise StoreError("memory store: admit failed (test knob)")
        return await super().admit(backend, caps, owner, limit, **kw)


def _admitter(store: TaskStore, got: list[str]) -> Admitter:
    return Admitter(
        store,
        Caps(max_running=10),
        backend_name="b1",
        owner="mgr_a",
        interval=60.0,
        fresh_ms=30_000,
        on_admitted=lambda tasks: got.extend(t.id for t in tasks),
    )


def _queued(task_id: str, *, ready: bool = True) -> Task:
    return Task(
        id=task_id,
        parent_session_id="ses_p",
        session_id=f"ses_{task_id}" if ready else None,
        prompt="p",
        agent=AGENT,
        description="d",
        status=TaskStatus.QUEUED,
        backend="b1",
        owner="mgr_a",
        created_at=now_ms(),
    )


async def _held(*, ready: bool = True) -> tuple[_HeldStore, list[str], Admitter]:
    """A store whose `admit` waits for its `release`, with `tsk_a` queued, an admitter on it,
    and the list of the ids it admits."""
    store = _HeldStore()
    got: list[str] = []
    await store.insert(_queued("tsk_a", ready=ready))
    store.hold.set()
    return store, got, _admitter(store, got)


async def test_callers_during_a_pass_share_the_next_one_and_none_is_missed() -> None:
    store, got, admitter = await _held(ready=False)
    first = asyncio.ensure_future(admitter.admit_now(include="tsk_a"))
    await until(lambda: len(store.calls) == 1, what="the first pass reading the queue")
    # asked for while the first pass runs (being prepared: only a pass that includes them
    # admits them): both wait for the next pass, and it includes both
    await store.insert(_queued("tsk_b", ready=False))
    await store.insert(_queued("tsk_c", ready=False))
    second = asyncio.ensure_future(admitter.admit_now(include="tsk_b"))
    third = asyncio.ensure_future(admitter.admit_now(include="tsk_c"))
    await asyncio.sleep(0.05)
    assert len(store.calls) == 1  # the next pass waits for the one under way
    store.release.set()
    assert [t.id for t in await first] == ["tsk_a"]
    shared = await second
    assert await third == shared
    assert sorted(t.id for t in shared) == ["tsk_b", "tsk_c"]
    # one pass for both callers, with the task each one prepares
    assert store.calls == [frozenset({"tsk_a"}), frozenset({"tsk_b", "tsk_c"})]
    assert admitter.passes == 2
    assert sorted(got) == ["tsk_a", "tsk_b", "tsk_c"] and admitter.admitted == 3


async def test_a_cancelled_caller_leaves_the_pass_to_the_others_and_errors_reach_all() -> None:
    store, got, admitter = await _held()
    leaving = asyncio.ensure_future(admitter.admit_now())
    staying = asyncio.ensure_future(admitter.admit_now())
    await until(lambda: len(store.calls) == 1, what="the pass reading the queue")
    leaving.cancel()
    store.release.set()
    assert [t.id for t in await staying] == ["tsk_a"]
    assert leaving.cancelled()
    assert got == ["tsk_a"]
    # a failing store: every caller of the pass hears of it; the next pass works
    store.hold.clear()
    store.fail_next = True
    await store.insert(_queued("tsk_b"))
    callers = [admitter.admit_now() for _ in range(3)]
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [type(r) for r in results] == [StoreError] * 3
    assert [t.id for t in await admitter.admit_now()] == ["tsk_b"]
    await admitter.stop()


async def test_a_burst_shares_passes_admits_each_task_once_and_keeps_the_cap(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parents = [await new_session(backend) for _ in range(3)]
    cap, n = 7, 60
    async with TaskManager(backend, store, config(max_running=cap)) as manager:
        running: set[str] = set()
        most = 0
        created: list[str] = []

        def follow(change: TaskChange) -> None:
            nonlocal most
            if change.kind == "task.created":
                created.append(change.task.id)
            if change.task.status.active:
                running.add(change.task.id)
            else:
                running.discard(change.task.id)
            most = max(most, len(running))

        manager.add_listener(follow)
        passes = manager.admitter.passes
        tasks = await asyncio.gather(
            *(
                manager.task(parents[i % 3], f"[gate:go] job {i}", AGENT, f"job {i}")
                for i in range(n)
            )
        )
        burst_passes = manager.admitter.passes - passes
        statuses = [t.status for t in tasks]
        assert statuses.count(TaskStatus.RUNNING) == cap
        assert statuses.count(TaskStatus.QUEUED) == n - cap
        # a pass per task() before passes were shared
        assert burst_passes <= n // 4, burst_passes
        gates.open("go")
        for task in tasks:
            await manager.output(task.id, block=True, timeout=30)
        ended = [await manager.store.get(t.id) for t in tasks]
        assert all(t is not None and t.status is TaskStatus.COMPLETED for t in ended)
        assert sorted(created) == sorted(t.id for t in tasks)  # each told once
        assert manager.admitter.admitted == n  # each admitted once
        assert most == cap


class _StoredAtOnce:
    """A store whose `queued_ahead` waits until `count` tasks were inserted: the tasks of a
    burst are all stored before any of them counts its place."""

    def __init__(self, store: TaskStore, count: int) -> None:
        self._store = store
        self._count = count
        self._all = asyncio.Event()
        self.inserted: list[Task] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def insert(self, task: Task) -> None:
        await self._store.insert(task)
        if task.prompt.startswith("burst"):
            self.inserted.append(task)
            if len(self.inserted) == self._count:
                self._all.set()

    async def queued_ahead(self, task: Task) -> int:
        if task.prompt.startswith("burst"):
            await asyncio.wait_for(self._all.wait(), 10)
        return await self._store.queued_ahead(task)


async def test_tasks_stored_at_once_by_two_managers_past_the_bound_are_refused_exactly(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    bound, n = 4, 10
    shared = cast(TaskStore, _StoredAtOnce(store, n))
    cfg = config(max_running=1, max_queued_per_parent=bound, backend_name="one-server")
    async with TaskManager(backend, shared, cfg) as one, TaskManager(backend, shared, cfg) as two:
        first = await one.task(parent, "[gate:x] first", AGENT, "holds the slot")
        assert first.status is TaskStatus.RUNNING
        results = await asyncio.gather(
            *((one, two)[i % 2].task(parent, f"burst {i}", AGENT, "a job") for i in range(n)),
            return_exceptions=True,
        )
        order = sorted(cast(_StoredAtOnce, shared).inserted, key=lambda t: (t.created_at, t.id))
        place = {t.prompt: k for k, t in enumerate(order)}
        for i, result in enumerate(results):
            k = place[f"burst {i}"]
            if k < bound:
                assert isinstance(result, Task) and result.status is TaskStatus.QUEUED, result
            else:
                assert isinstance(result, QueueFullError), result
                # those ahead of it when it counted (the ones refused before it are gone)
                assert bound <= result.queued <= k and result.cap == bound
        kept = await store.list_tasks(parent, (TaskStatus.QUEUED,))
        assert sorted(t.id for t in kept) == sorted(t.id for t in order[:bound])
        gates.open("x")


async def test_stop_waits_for_the_pass_under_way() -> None:
    held, got, admitter = await _held()
    caller = asyncio.ensure_future(admitter.admit_now())
    await until(lambda: len(held.calls) == 1, what="the pass reading the queue")
    stopping = asyncio.ensure_future(admitter.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # the pass is not cut off: its caller waits for it
    held.release.set()
    await stopping
    assert [t.id for t in await caller] == ["tsk_a"] and got == ["tsk_a"]
