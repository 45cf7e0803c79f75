"""Task manager benchmarks, on the in-process backend (the manager's own cost, no network) and
on a real ``opencode serve`` answered by the fake model of tests/e2e (the cost a user sees):

- ``task()`` launch latency, plain and forked from a parent of 2,000 generated OpenCode messages
  (``benches/generate.py``, ~10 MB of JSON): the time until the call returns, and the time until
  the child has its forked context and its prompt (the fork pipeline runs in between, on the
  Rust engine or, as the reference, on the pure-Python one);
- completions handled per second: N tasks launched together with an instant responder, timed
  until every one is completed and its notice delivered to the parent.

``ASYNCAGENTS_BENCH_SMOKE=1`` uses a 200-message parent and 20 (OpenCode: 10) concurrent tasks.
On OpenCode the parent is made of ~5 KB ``noReply`` prompts (OpenCode has no bulk import over
HTTP), and "child prompted" ends when ``prompt_async`` was accepted.
``python benches/report.py --tasks`` prints the Markdown table.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from asyncagents import build_fork_context
from asyncagents.tasks import (
    InMemoryTaskStore,
    InProcessBackend,
    InProcessTurn,
    OpenCodeBackend,
    PromptRequest,
    TaskManager,
    TaskStatus,
)
from generate import session_objects

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
PARENT_MESSAGES = 200 if SMOKE else 2_000
CONCURRENT = 20 if SMOKE else 200
ROUNDS = 2 if SMOKE else 10


async def _instant(turn: InProcessTurn) -> str:
    return "done: " + turn.prompt


def _fork_builder(engine: str) -> Callable[[bytes], Any]:
    return lambda raw: build_fork_context(raw, engine=engine)  # type: ignore[arg-type]


async def _seeded_parent(backend: InProcessBackend, messages: int) -> str:
    parent = str((await backend.create_session(title="parent"))["id"])
    backend.seed_messages(parent, session_objects(messages))
    return parent


async def _until(cond: Callable[[], bool], timeout: float = 120.0) -> None:
    end = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > end:
            raise AssertionError("benchmark condition not met in time")
        await asyncio.sleep(0.0005)


class Rounds:
    """pytest-benchmark's pedantic loop on one event loop: `setup` and `settle` are not timed.

    `settle` runs before each round and lets the previous round's children finish, so no
    background work of one round is counted in the next.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(
        self,
        benchmark: Any,
        timed: Callable[[], Coroutine[Any, Any, None]],
        settle: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        benchmark.pedantic(
            lambda: self.loop.run_until_complete(timed()),
            setup=lambda: self.loop.run_until_complete(settle()),
            rounds=ROUNDS,
            iterations=1,
            warmup_rounds=0 if SMOKE else 1,
        )
        self.loop.run_until_complete(settle())

    def close(self, manager: TaskManager) -> None:
        self.loop.run_until_complete(manager.aclose())
        self.loop.close()


LAUNCHES = [
    # task() returns before any fork work, so the engine only matters once the child is prompted
    ("returned", False, "rust"),
    ("returned", True, "rust"),
    ("child-prompted", False, "rust"),
    ("child-prompted", True, "rust"),
    ("child-prompted", True, "python"),
]


@pytest.mark.parametrize(
    ("until", "fork", "engine"),
    LAUNCHES,
    ids=[f"{u}-{'fork-' + e if f else 'plain'}" for u, f, e in LAUNCHES],
)
def test_launch(benchmark: Any, fork: bool, engine: str, until: str) -> None:
    """Latency of one launch: until `task()` returns, or until the child got its prompt."""
    benchmark.group = f"task-launch-{until}"
    benchmark.extra_info.update(
        {
            "backend": "in-process",
            "fork": fork,
            "engine": engine,
            "until": until,
            "parent_messages": PARENT_MESSAGES,
        }
    )
    rounds = Rounds()
    backend = InProcessBackend(_instant)
    manager = TaskManager(
        backend,
        InMemoryTaskStore(),
        notify_parent=False,
        fork_builder=_fork_builder(engine),
    )
    parent = rounds.loop.run_until_complete(_seeded_parent(backend, PARENT_MESSAGES))
    launched: list[str] = []

    async def timed() -> None:
        prompts = len(backend.prompts)
        task = await manager.task(parent, "go", "build", "bench", fork=fork)
        assert task.status is TaskStatus.RUNNING
        launched.append(task.id)
        if until == "child-prompted":
            # the forked context (a noReply prompt) and the task prompt both reach the child
            want = prompts + (2 if fork else 1)
            await _until(lambda: len(backend.prompts) >= want)

    async def settle() -> None:
        await manager.start()
        await _until(lambda: all(_ended(manager, t) for t in launched))
        await manager.wait_idle()

    rounds.run(benchmark, timed, settle)
    assert all(_ended(manager, t) for t in launched)
    rounds.close(manager)


def _ended(manager: TaskManager, task_id: str) -> bool:
    task = manager.store.get(task_id)
    return task is not None and task.status is TaskStatus.COMPLETED


def test_completions_per_second(benchmark: Any) -> None:
    """N concurrent tasks, from launch until all completed and their notices delivered."""
    benchmark.group = "task-completions"
    benchmark.extra_info.update({"concurrent": CONCURRENT, "backend": "in-process"})
    rounds = Rounds()
    backend = InProcessBackend(_instant)
    manager = TaskManager(backend, InMemoryTaskStore())
    parents: list[str] = []

    async def settle() -> None:
        await manager.start()
        await asyncio.wait_for(manager.events.connected.wait(), 5)
        await manager.wait_idle()
        for parent in parents:
            await manager.clear(parent)
        parents[:] = [str((await backend.create_session())["id"]) for _ in range(4)]
        manager.courier.delivered = 0
        manager.completions = 0

    async def timed() -> None:
        tasks = await asyncio.gather(
            *(
                manager.task(parents[i % 4], f"job {i}", "build", f"job {i}")
                for i in range(CONCURRENT)
            )
        )
        await _until(lambda: manager.courier.delivered >= CONCURRENT)
        assert manager.completions == CONCURRENT
        assert all(_ended(manager, t.id) for t in tasks)

    rounds.run(benchmark, timed, settle)
    rounds.close(manager)


# --- the same, against a real `opencode serve` (the fake model of tests/e2e answers at once) ---

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from e2e_support import running_server  # noqa: E402
from fake_model import FakeModel  # noqa: E402

OPENCODE_CONCURRENT = 10 if SMOKE else 50


@pytest.fixture(scope="module")
def opencode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = FakeModel().start()
    try:
        with running_server(model, tmp_path_factory.mktemp("opencode")) as server:
            yield server.base_url
    finally:
        model.stop()


async def _opencode_parent(backend: OpenCodeBackend, messages: int) -> str:
    """A parent of `messages` stored messages (noReply prompts of ~5 KB, 8 in flight)."""
    parent = str((await backend.create_session(title="bench parent"))["id"])
    body = "notes " + "0123456789abcdef\n" * 300
    for start in range(0, messages, 8):
        await asyncio.gather(
            *(
                backend.prompt(parent, PromptRequest(text=f"{i}: {body}", no_reply=True))
                for i in range(start, min(start + 8, messages))
            )
        )
    return parent


@pytest.mark.parametrize(
    ("until", "fork", "engine"),
    LAUNCHES,
    ids=[f"{u}-{'fork-' + e if f else 'plain'}" for u, f, e in LAUNCHES],
)
def test_launch_opencode(
    benchmark: Any, opencode: str, fork: bool, engine: str, until: str
) -> None:
    """`task()` latency on a real server: its return, or the child's prompt being accepted."""
    benchmark.group = f"opencode-launch-{until}"
    benchmark.extra_info.update(
        {
            "backend": "opencode",
            "fork": fork,
            "engine": engine,
            "until": until,
            "parent_messages": PARENT_MESSAGES,
        }
    )
    rounds = Rounds()
    backend = OpenCodeBackend(opencode)
    manager = TaskManager(
        backend, InMemoryTaskStore(), notify_parent=False, fork_builder=_fork_builder(engine)
    )
    parent = rounds.loop.run_until_complete(
        _opencode_parent(backend, PARENT_MESSAGES if fork else 1)
    )
    launched: list[str] = []

    async def timed() -> None:
        task = await manager.task(parent, "go", "build", "bench", fork=fork)
        assert task.status is TaskStatus.RUNNING
        launched.append(task.id)
        if until == "child-prompted":
            await _until(lambda: _prompted(manager, task.id))

    async def settle() -> None:
        await manager.start()
        await _until(lambda: all(_ended(manager, t) for t in launched))
        await manager.wait_idle()

    rounds.run(benchmark, timed, settle)
    assert all(_ended(manager, t) for t in launched)
    rounds.close(manager)


def _prompted(manager: TaskManager, task_id: str) -> bool:
    task = manager.store.get(task_id)
    return task is not None and task.turn_started_at is not None


def test_completions_per_second_opencode(benchmark: Any, opencode: str) -> None:
    """N concurrent tasks on a real server until all are completed and notified."""
    benchmark.group = "opencode-completions"
    benchmark.extra_info.update({"concurrent": OPENCODE_CONCURRENT, "backend": "opencode"})
    rounds = Rounds()
    backend = OpenCodeBackend(opencode)
    manager = TaskManager(backend, InMemoryTaskStore(), poll_interval=1.0)
    parents: list[str] = []

    async def settle() -> None:
        await manager.start()
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        await manager.wait_idle()
        for parent in parents:
            await manager.clear(parent)
        parents[:] = [str((await backend.create_session())["id"]) for _ in range(4)]
        manager.courier.delivered = 0
        manager.completions = 0

    async def timed() -> None:
        tasks = await asyncio.gather(
            *(
                manager.task(parents[i % 4], f"job {i}", "build", f"job {i}")
                for i in range(OPENCODE_CONCURRENT)
            )
        )
        await _until(lambda: manager.courier.delivered >= OPENCODE_CONCURRENT)
        assert manager.completions == OPENCODE_CONCURRENT
        assert all(_ended(manager, t.id) for t in tasks)

    rounds.run(benchmark, timed, settle)
    rounds.close(manager)
