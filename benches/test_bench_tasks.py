"""Task manager benchmarks, on the in-process backend (the manager's own cost, no network) and
on a real ``opencode serve`` answered by the fake model of tests/e2e (the cost a user sees):

- ``task()`` launch latency, plain and forked from a parent of 2,000 messages: the time until
  the call returns, and the time until the child's prompt was accepted (for a fork, after the
  parent's messages were read, the fork pipeline ran, on the Rust engine or, as the reference,
  on the pure-Python one, and the context was injected);
- completions handled per second: N tasks launched together, timed until every one is
  completed and its notice delivered to its parent;
- worker processes sharing one store, takeover after a kill -9 and memory per 1,000 active
  tasks are in ``benches/test_bench_workers.py``.

In-process, the parent is a generated OpenCode session (``benches/generate.py``, ~10 MB of JSON)
and replies are instant. On OpenCode the parent is made of ~5 KB ``noReply`` prompts (OpenCode
has no bulk import over HTTP). ``ASYNCAGENTS_BENCH_SMOKE=1`` uses a 200-message parent and 20
(OpenCode: 10) concurrent tasks.
``python benches/report.py --tasks`` prints the tables.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
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
    SessionBackend,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from generate import session_objects

# the e2e server launcher (tests/e2e) and the helpers it imports (tests/)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from e2e_support import running_server
from fake_model import FakeModel

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
PARENT_MESSAGES = 200 if SMOKE else 2_000
CONCURRENT = {"in-process": 20 if SMOKE else 200, "opencode": 10 if SMOKE else 50}
ROUNDS = 2 if SMOKE else 10
BACKENDS = ["in-process", "opencode"]


@pytest.fixture(scope="module")
def opencode_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = FakeModel().start()
    try:
        with running_server(model, tmp_path_factory.mktemp("opencode")) as server:
            yield server.base_url
    finally:
        model.stop()


async def _instant(turn: InProcessTurn) -> str:
    return "done: " + turn.prompt


def _backend(kind: str, request: pytest.FixtureRequest) -> SessionBackend:
    """A fresh backend; the OpenCode server is started once per module, on first use."""
    if kind == "in-process":
        return InProcessBackend(_instant)
    return OpenCodeBackend(request.getfixturevalue("opencode_url"))


async def _parent(backend: SessionBackend, messages: int) -> str:
    """A parent session with `messages` messages of history."""
    parent = str((await backend.create_session(title="bench parent"))["id"])
    if isinstance(backend, InProcessBackend):
        backend.seed_messages(parent, session_objects(messages))
        return parent
    body = "notes " + "0123456789abcdef\n" * 300
    for start in range(0, messages, 8):  # 8 in flight
        await asyncio.gather(
            *(
                backend.prompt(parent, PromptRequest(text=f"{i}: {body}", no_reply=True))
                for i in range(start, min(start + 8, messages))
            )
        )
    return parent


def _fork_builder(engine: str) -> Callable[[bytes, Any], Any]:
    return lambda raw, config=None: build_fork_context(raw, config, engine=engine)  # type: ignore[arg-type]


async def _until(cond: Callable[[], bool | Awaitable[bool]], timeout: float = 120.0) -> None:
    end = time.perf_counter() + timeout
    while True:
        value = cond()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if time.perf_counter() > end:
            raise AssertionError("benchmark condition not met in time")
        await asyncio.sleep(0.0005)


async def _ended(manager: TaskManager, task_id: str) -> bool:
    task = await manager.store.get(task_id)
    return task is not None and task.status is TaskStatus.COMPLETED


async def _prompted(manager: TaskManager, task_id: str) -> bool:
    """The child's prompt was accepted by the server (after the fork, for a forked task)."""
    task = await manager.store.get(task_id)
    return task is not None and task.turn_started_at is not None


async def _all_ended(manager: TaskManager, task_ids: list[str]) -> bool:
    for task_id in task_ids:
        if not await _ended(manager, task_id):
            return False
    return True


def _rounds(
    benchmark: Any,
    manager: TaskManager,
    timed: Callable[[], Coroutine[Any, Any, None]],
    settle: Callable[[], Awaitable[None]],
) -> None:
    """pytest-benchmark's pedantic loop on one event loop; `settle` runs untimed before each
    round (and once after the last), so no background work of one round counts in the next."""
    loop = asyncio.new_event_loop()

    async def prepare() -> None:
        await manager.start()
        await settle()
        await manager.wait_idle()

    try:
        benchmark.pedantic(
            lambda: loop.run_until_complete(timed()),
            setup=lambda: loop.run_until_complete(prepare()),
            rounds=ROUNDS,
            iterations=1,
            warmup_rounds=0 if SMOKE else 1,
        )
        loop.run_until_complete(prepare())
    finally:
        loop.run_until_complete(manager.aclose())
        loop.close()


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
@pytest.mark.parametrize("backend_kind", BACKENDS)
def test_launch(
    benchmark: Any,
    request: pytest.FixtureRequest,
    backend_kind: str,
    until: str,
    fork: bool,
    engine: str,
) -> None:
    """Latency of one launch: until `task()` returns, or until the child's prompt is accepted."""
    benchmark.group = f"{backend_kind}-launch-{until}"
    benchmark.extra_info.update(
        {
            "backend": backend_kind,
            "fork": fork,
            "engine": engine,
            "until": until,
            "parent_messages": PARENT_MESSAGES,
        }
    )
    backend = _backend(backend_kind, request)
    manager = TaskManager(
        backend,
        InMemoryTaskStore(),
        TaskManagerConfig(notify_parent=False, max_running=10_000),
        fork_builder=_fork_builder(engine),
    )
    parent: list[str] = []  # made in the first (untimed) settle, on the benchmark's loop
    launched: list[str] = []

    async def timed() -> None:
        task = await manager.task(parent[0], "go", "build", "bench", fork=fork)
        assert task.status is TaskStatus.RUNNING
        launched.append(task.id)
        if until == "child-prompted":
            await _until(lambda: _prompted(manager, task.id))

    async def settle() -> None:
        if not parent:
            parent.append(await _parent(backend, PARENT_MESSAGES if fork else 1))
        await _until(lambda: _all_ended(manager, launched))

    _rounds(benchmark, manager, timed, settle)
    assert launched


@pytest.mark.parametrize("backend_kind", BACKENDS)
def test_completions_per_second(
    benchmark: Any, request: pytest.FixtureRequest, backend_kind: str
) -> None:
    """N concurrent tasks, from launch until all are completed and their notices delivered."""
    n = CONCURRENT[backend_kind]
    benchmark.group = f"{backend_kind}-completions"
    benchmark.extra_info.update({"concurrent": n, "backend": backend_kind})
    backend = _backend(backend_kind, request)
    manager = TaskManager(
        backend,
        InMemoryTaskStore(),
        TaskManagerConfig(poll_interval=1.0, wake="never", max_running=10_000),
    )
    parents: list[str] = []

    async def settle() -> None:
        await asyncio.wait_for(manager.events.connected.wait(), 30)
        for parent in parents:
            await manager.clear(parent)
        parents[:] = [str((await backend.create_session())["id"]) for _ in range(4)]
        manager.courier.delivered = 0
        manager.recorder.completions = 0

    async def timed() -> None:
        tasks = await asyncio.gather(
            *(manager.task(parents[i % 4], f"job {i}", "build", f"job {i}") for i in range(n))
        )
        await _until(lambda: manager.courier.delivered >= n)
        assert manager.completions == n
        assert await _all_ended(manager, [t.id for t in tasks])

    _rounds(benchmark, manager, timed, settle)
