"""A try again after a provider error, and a follow-up queued for a running turn's end, wait in
the admission queue like any task (in-process backend, both stores): the turn's end gives up
its slot, a try whose backoff is not over is skipped without blocking the others, the caps hold
at every moment (sampled), a ``when="now"`` follow-up keeps the slot of the turn it aborts, and
a queued try again is taken over (and sent once) after its manager stops or dies."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    ProviderError,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    TaskStore,
)
from asyncagents.tasks.admission import Caps
from asyncagents.tasks.backend import PromptRequest
from asyncagents.tasks.models import Task, now_ms
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import session_of, until

AGENT = "explore"
_COUNTS = "0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00"
NO_USAGE = f"Usage: {_COUNTS}."
NO_USAGE_RESUMED = f"Usage: this turn {_COUNTS}; all turns {_COUNTS}."
RATE_LIMITED = "APIError: Rate limited: slow down"
DEFAULT = "the server's default model"
GOES_ON = (
    "starts by itself: continue with other work (you will get a notice), or call "
    "asyncagents_output again with block=true to wait."
)


class Provider:
    """Replies ``Reply to: <prompt>``. A prompt with ``[429:N]`` fails with HTTP 429 on its
    first N tries in its session; ``[gate:NAME]`` waits until that gate opens. Records each
    call's prompt and time (ms)."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.calls: list[tuple[str, int]] = []

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def prompts(self) -> list[str]:
        return [p for p, _ in self.calls]

    async def __call__(self, turn: InProcessTurn) -> str:
        self.calls.append((turn.prompt, now_ms()))
        for name in re.findall(r"\[gate:([a-z0-9_]+)\]", turn.prompt):
            await self.gate(name).wait()
        fails = re.search(r"\[429:([0-9]+)\]", turn.prompt)
        if fails:
            tries = sum(
                1
                for m in turn.history
                if m["info"]["role"] == "user"
                and "".join(str(p.get("text", "")) for p in m["parts"]) == turn.prompt
            )
            if tries <= int(fails.group(1)):
                raise ProviderError("Rate limited: slow down", 429)
        return "Reply to: " + turn.prompt


class CapSampler:
    """Every 5 ms: how many tasks the store holds running, and how many sessions the server
    runs; the most of each ever seen."""

    def __init__(self, store: TaskStore, backend: InProcessBackend) -> None:
        self.store = store
        self.backend = backend
        self.most_stored = 0
        self.most_busy = 0
        self.samples = 0
        self._job: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            tasks = await self.store.list_tasks()
            busy = await self.backend.status()
            self.most_stored = max(self.most_stored, sum(t.status.active for t in tasks))
            self.most_busy = max(self.most_busy, len(busy))
            self.samples += 1
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> CapSampler:
        self._job = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._job is not None
        self._job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._job


@pytest.fixture
def provider() -> Provider:
    return Provider()


@pytest.fixture
def backend(provider: Provider) -> InProcessBackend:
    return InProcessBackend(provider)


def config(**kw: object) -> TaskManagerConfig:
    base: dict[str, object] = {
        "poll_interval": 0.2,
        "wake": "never",
        "notice_retry_initial": 0.05,
        "max_running": 1,
        # what admits a task in these tests is the direct path (a slot freed, a backoff over)
        "admission_interval": 60.0,
        "retry_initial": 0.05,
        "retry_max": 0.05,
    }
    return TaskManagerConfig.model_validate({**base, **kw})


@contextlib.asynccontextmanager
async def started(
    backend: InProcessBackend, store: TaskStore, **kw: object
) -> AsyncIterator[TaskManager]:
    async with TaskManager(backend, store, config(**kw)) as manager:
        await asyncio.wait_for(manager.events.connected.wait(), 5)
        yield manager


async def session(backend: InProcessBackend) -> str:
    return str((await backend.create_session(title="parent"))["id"])


async def status_of(manager: TaskManager, task_id: str) -> TaskStatus | None:
    task = await manager.store.get(task_id)
    return None if task is None else task.status


async def stored(manager: TaskManager, task_id: str) -> Task:
    task = await manager.store.get(task_id)
    assert task is not None
    return task


async def wait_status(manager: TaskManager, task_id: str, status: TaskStatus, what: str) -> None:
    async def there() -> bool:
        return await status_of(manager, task_id) is status

    await until(there, 10, what)


def user_texts(messages: list[dict[str, object]]) -> list[str]:
    out = []
    for m in messages:
        info = m["info"]
        parts = m["parts"]
        assert isinstance(info, dict) and isinstance(parts, list)
        if info.get("role") == "user":
            out.append("".join(str(p.get("text", "")) for p in parts))
    return out


async def test_a_try_again_waits_for_a_free_slot_while_another_task_runs(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store) as manager:
        p1, p2 = await session(backend), await session(backend)
        async with CapSampler(store, backend) as sampler:
            a = await manager.task(p1, "[gate:a] [429:1] work A", AGENT, "retry waits")
            assert a.status is TaskStatus.RUNNING
            b = await manager.task(p2, "[gate:b] work B", AGENT, "holds the slot")
            assert b.status is TaskStatus.QUEUED
            provider.gate("a").set()
            # the failed turn gives up its slot: B runs, A's try again waits in the queue
            await wait_status(manager, b.id, TaskStatus.RUNNING, "B admitted")
            await asyncio.sleep(0.4)  # A's backoff (0.05 s) is long over: the cap holds it
            waiting = await stored(manager, a.id)
            assert waiting.status is TaskStatus.QUEUED and waiting.tries == [None, None]
            assert waiting.retry_at is not None and waiting.retry_at < now_ms()
            out = await run_tool(manager, p1, "asyncagents_output", {"task_id": a.id})
            assert out == (
                f"Task `{a.id}` [queued] {AGENT}: retry waits\n"
                "Waiting in the queue: position 1 in the queue; 1/1 running on this server "
                "(max_running).\n"
                f"Try 2 on {DEFAULT}, after a provider error: {RATE_LIMITED}\n"
                f"The next try {GOES_ON}\n{NO_USAGE}"
            )
            listed = await run_tool(manager, p1, "asyncagents_list", {})
            assert listed.splitlines()[1] == (
                f"- `{a.id}` [queued] {AGENT}: retry waits (2 attempts) (0 tokens, $0.00)"
            )
            assert provider.prompts() == ["[gate:a] [429:1] work A", "[gate:b] work B"]
            provider.gate("b").set()
            await wait_status(manager, a.id, TaskStatus.COMPLETED, "A's try again answered")
        final = await stored(manager, a.id)
        assert final.result == "Reply to: [gate:a] [429:1] work A"
        assert provider.prompts() == [
            "[gate:a] [429:1] work A",
            "[gate:b] work B",
            "[gate:a] [429:1] work A",
        ]
        # the sampler read the store through the wait (a few dozen times; fewer on a loaded machine)
        assert sampler.samples > 10
        assert sampler.most_stored == 1 and sampler.most_busy == 1
        a.session_id = await session_of(manager, a.id)
        # the try is a new user message after the failed one, sent once
        assert user_texts(await backend.messages(a.session_id)) == ["[gate:a] [429:1] work A"] * 2
        out = await run_tool(manager, p1, "asyncagents_output", {"task_id": a.id})
        assert out.splitlines()[:2] == [
            f"Task `{a.id}` [completed] {AGENT}: retry waits",
            "Attempts: 2 (2 on inprocess/inprocess)",
        ]


async def test_a_backoff_is_honoured_and_does_not_hold_back_the_tasks_behind_it(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store, retry_initial=1.5, retry_max=1.5) as manager:
        parent = await session(backend)
        async with CapSampler(store, backend) as sampler:
            a = await manager.task(parent, "[gate:a] [429:1] first", AGENT, "backs off")
            b = await manager.task(parent, "[gate:b] second", AGENT, "queued behind")
            assert b.status is TaskStatus.QUEUED
            provider.gate("a").set()
            # A is older, in the same parent, but its backoff is not over: B goes first
            await wait_status(manager, b.id, TaskStatus.RUNNING, "B admitted")
            waiting = await stored(manager, a.id)
            assert waiting.status is TaskStatus.QUEUED and waiting.retry_at is not None
            out = await run_tool(manager, parent, "asyncagents_output", {"task_id": a.id})
            lines = out.splitlines()
            assert lines[:2] == [
                f"Task `{a.id}` [queued] {AGENT}: backs off",
                "Waiting in the queue: position 1 in the queue; 1/1 running on this server "
                "(max_running).",
            ]
            # 1.5 s from the 429, counted down (a loaded machine may read it once it is over:
            # B holds the one slot, so A still waits and says 0s)
            assert re.fullmatch(
                rf"Try 2 on {DEFAULT} in [0-2]s, after a provider error: {RATE_LIMITED}",
                lines[2],
            ), lines
            assert lines[3:] == [f"The next try {GOES_ON}", NO_USAGE]
            provider.gate("b").set()
            await wait_status(manager, b.id, TaskStatus.COMPLETED, "B done")
            # the slot is free, the backoff is not over yet: A still waits
            if now_ms() < waiting.retry_at - 500:  # else it may end before the read
                assert await status_of(manager, a.id) is TaskStatus.QUEUED
            await wait_status(manager, a.id, TaskStatus.COMPLETED, "A's try again answered")
        tries = [t for p, t in provider.calls if p == "[gate:a] [429:1] first"]
        assert len(tries) == 2 and tries[1] >= waiting.retry_at
        assert sampler.most_stored == 1 and sampler.most_busy == 1


async def test_a_follow_up_queued_for_the_turns_end_waits_for_a_slot(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store) as manager:
        p1, p2 = await session(backend), await session(backend)
        async with CapSampler(store, backend) as sampler:
            a = await manager.task(p1, "[gate:a] first", AGENT, "with a follow-up")
            await until(lambda: bool(provider.calls), 5, "A running")
            await manager.task(p1, "second", resume=a.id, when="after_current")
            b = await manager.task(p2, "[gate:b] other", AGENT, "another parent")
            assert b.status is TaskStatus.QUEUED
            provider.gate("a").set()
            # A's turn ended into its follow-up, which waits: B (its parent never served) runs
            await wait_status(manager, b.id, TaskStatus.RUNNING, "B admitted")
            waiting = await stored(manager, a.id)
            assert waiting.status is TaskStatus.QUEUED and waiting.resume_count == 1
            assert waiting.last_prompt == "second" and waiting.pending_followups == []
            out = await run_tool(manager, p1, "asyncagents_output", {"task_id": a.id})
            assert out == (
                f"Task `{a.id}` (resumed) [queued] {AGENT}: with a follow-up\n"
                "Waiting in the queue: position 1 in the queue; 1/1 running on this server "
                "(max_running).\n"
                f"The follow-up {GOES_ON}\n{NO_USAGE_RESUMED}"
            )
            # another follow-up joins it, after it
            text = await run_tool(
                manager,
                p1,
                "asyncagents_task",
                {"prompt": "third", "resume": a.id, "when": "after_current"},
            )
            assert text == (
                f"Follow-up queued for background task `{a.id}`: with a follow-up\nIt is sent "
                "when the running turn ends (1 follow-up(s) queued). You will get a notice with "
                "its response."
            )
            out = await run_tool(manager, p1, "asyncagents_output", {"task_id": a.id})
            assert out == (
                f"Task `{a.id}` (resumed) [queued] {AGENT}: with a follow-up\n"
                "Waiting in the queue: position 1 in the queue; 1/1 running on this server "
                "(max_running).\n"
                "1 queued follow-up(s) are sent when this turn ends.\n"
                f"The follow-up {GOES_ON}\n{NO_USAGE_RESUMED}"
            )
            await until(lambda: len(provider.calls) == 2, 5, "B's prompt")
            assert provider.prompts() == ["[gate:a] first", "[gate:b] other"]
            provider.gate("b").set()

            async def answered() -> bool:
                t = await manager.store.get(a.id)
                return t is not None and t.status is TaskStatus.COMPLETED and t.resume_count == 2

            await until(answered, 10, "both follow-ups answered")
        assert sampler.most_stored == 1 and sampler.most_busy == 1
        assert provider.prompts() == ["[gate:a] first", "[gate:b] other", "second", "third"]
        a.session_id = await session_of(manager, a.id)
        assert user_texts(await backend.messages(a.session_id)) == [
            "[gate:a] first",
            "second",
            "third",
        ]

        async def notices() -> bool:
            return len(await notices_in(backend, p1)) >= 3

        await until(notices, 10, "a notice per turn")
        texts = await notices_in(backend, p1)
        assert "Result:\nReply to: [gate:a] first" in texts[0]
        assert (
            "answered your follow-up: with a follow-up\nFull response:\nReply to: second"
            in (texts[1])
        )
        assert "Full response:\nReply to: third" in texts[2]


async def test_now_keeps_the_aborted_turns_slot_and_replaces_a_waiting_try(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store, retry_initial=30.0, retry_max=30.0) as manager:
        p1, p2 = await session(backend), await session(backend)
        async with CapSampler(store, backend) as sampler:
            a = await manager.task(p1, "[gate:a] long work", AGENT, "steered")
            await until(lambda: bool(provider.calls), 5, "A running")
            b = await manager.task(p2, "[gate:b] other", AGENT, "waits")
            assert b.status is TaskStatus.QUEUED
            # "now" aborts A's turn and sends the follow-up in its slot: B still waits
            await manager.task(p1, "[gate:s] steer", resume=a.id, when="now")
            await until(lambda: "[gate:s] steer" in provider.prompts(), 5, "the follow-up sent")
            assert await status_of(manager, a.id) is TaskStatus.RESUMED
            assert await status_of(manager, b.id) is TaskStatus.QUEUED
            provider.gate("s").set()
            await wait_status(manager, b.id, TaskStatus.RUNNING, "B admitted")
            # A's next turn fails and waits 30 s for its try again; "now" takes its place
            await manager.task(p1, "[gate:c] [429:1] fails once", resume=a.id, when="after_current")
            provider.gate("b").set()
            provider.gate("c").set()

            async def retry_waits() -> bool:
                t = await manager.store.get(a.id)
                return t is not None and t.status is TaskStatus.QUEUED and bool(t.tries)

            await until(retry_waits, 10, "A's try again waiting")
            text = await run_tool(
                manager,
                p1,
                "asyncagents_task",
                {"prompt": "instead", "resume": a.id, "when": "now"},
            )
            assert text.startswith("Follow-up ")  # queued or sent: the queue is free
            await until(lambda: "instead" in provider.prompts(), 5, "sent without the backoff")

            async def done() -> bool:
                t = await manager.store.get(a.id)
                return t is not None and t.status is TaskStatus.COMPLETED and t.resume_count == 3

            await until(done, 10, "A's last follow-up answered")
        final = await stored(manager, a.id)
        assert final.result == "Reply to: instead" and final.tries == []
        assert sampler.most_stored == 1 and sampler.most_busy == 1
        a.session_id = await session_of(manager, a.id)
        assert user_texts(await backend.messages(a.session_id)) == [
            "[gate:a] long work",
            "[gate:s] steer",
            "[gate:c] [429:1] fails once",
            "instead",
        ]


async def test_now_on_a_waiting_try_takes_its_place_in_the_queue(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store, retry_initial=30.0, retry_max=30.0) as manager:
        p1, p2 = await session(backend), await session(backend)
        a = await manager.task(p1, "[gate:a] [429:1] work", AGENT, "replaced try")
        b = await manager.task(p2, "[gate:b] other", AGENT, "holds the slot")
        provider.gate("a").set()
        await wait_status(manager, b.id, TaskStatus.RUNNING, "B admitted")
        text = await run_tool(
            manager, p1, "asyncagents_task", {"prompt": "instead", "resume": a.id, "when": "now"}
        )
        assert text == (
            f"Follow-up queued for background task `{a.id}` (resumed) ({AGENT}): replaced try "
            "(position 1 in the queue; 1/1 running on this server (max_running))\n"
            "Status: queued. It is sent by itself when a slot frees; you will get a notice with "
            "its full response when it answers. To wait for it now, call "
            f'`asyncagents_output(task_id="{a.id}", block=true)`.'
        )
        waiting = await stored(manager, a.id)
        assert waiting.tries == [] and waiting.retry_at is None and waiting.resume_count == 1
        provider.gate("b").set()
        # no backoff left: admitted as soon as B frees the slot (not in 30 s)
        await wait_status(manager, a.id, TaskStatus.COMPLETED, "the follow-up answered")
        a.session_id = await session_of(manager, a.id)
        assert user_texts(await backend.messages(a.session_id)) == [
            "[gate:a] [429:1] work",
            "instead",
        ]

        async def one_notice() -> bool:
            return len(await notices_in(backend, p1)) >= 1

        await until(one_notice, 10, "the follow-up's notice")
        await asyncio.sleep(0.3)
        (notice,) = await notices_in(backend, p1)  # none for the replaced try
        assert "Full response:\nReply to: instead" in notice


@pytest.mark.parametrize("crash", ["queued", "admitted", "sent"])
async def test_a_queued_try_again_is_taken_over_and_sent_once(
    tmp_path: Path, provider: Provider, crash: str
) -> None:
    path = tmp_path / "shared.sqlite3"
    backend = InProcessBackend(provider)
    parent = await session(backend)
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    a = TaskManager(backend, store_a, config(lease_ttl=600, retry_initial=1.0, retry_max=1.0))
    await a.start()
    task = await a.task(parent, "[429:1] job", AGENT, "handed over")

    async def waits() -> bool:
        t = await store_a.get(task.id)
        return t is not None and t.status is TaskStatus.QUEUED and bool(t.tries)

    await until(waits, 10, "the try again queued")
    await a.close()
    queued = await stored(a, task.id)
    assert queued.retry_at is not None and queued.prompt_message_id
    if crash in ("admitted", "sent"):
        # a manager admitted it and died before sending (or before recording the send)
        await store_a.renew_lease("mgr_dead", a.backend_name, 0.5)
        (taken,) = await store_a.take_over("mgr_dead", a.backend_name)
        assert taken.id == task.id
        await asyncio.sleep(max(0.0, (queued.retry_at - now_ms()) / 1000) + 0.05)
        (admitted,) = await store_a.admit(a.backend_name, Caps(max_running=1), "mgr_dead", 10)
        assert admitted.id == task.id and admitted.status is TaskStatus.RUNNING
        if crash == "sent":
            assert admitted.session_id
            await backend.prompt_async(
                admitted.session_id,
                PromptRequest(text="[429:1] job", message_id=admitted.prompt_message_id),
            )
        await asyncio.sleep(0.6)  # its lease runs out
    async with TaskManager(backend, store_b, config(lease_ttl=1.5)) as b:
        await until(lambda: b.leases.taken_over == 1, 10, "takeover")
        await wait_status(b, task.id, TaskStatus.COMPLETED, "the try again answered")
        final = await stored(b, task.id)
        assert final.owner == b.instance_id and final.tries == [None, None]
        assert final.result == "Reply to: [429:1] job"
        if crash == "queued":
            tries = [t for p, t in provider.calls if p == "[429:1] job"]
            assert tries[1] >= queued.retry_at  # the backoff survived the handover
    assert final.session_id
    # sent once: one user message per try
    assert user_texts(await backend.messages(final.session_id)) == ["[429:1] job"] * 2
    assert provider.prompts() == ["[429:1] job"] * 2
    await store_a.close()
    await store_b.close()


async def test_the_fallback_counts_against_its_own_models_cap(
    store: TaskStore, provider: Provider
) -> None:
    backend = InProcessBackend(provider)
    backend.providers_body = {
        "providers": [
            {"id": "inprocess", "models": {"inprocess": {"id": "inprocess"}}},
            {"id": "small", "models": {"tiny": {"id": "tiny"}}},
        ],
        "default": {},
    }
    caps = {"max_running": 5, "max_running_per_model": {"small/tiny": 1}, "attempts": 1}
    async with started(backend, store, fallback_models=["small/tiny"], **caps) as manager:
        p1, p2 = await session(backend), await session(backend)
        tiny = await manager.task(p2, "[gate:t] on tiny", AGENT, "tiny", model="small/tiny")
        assert tiny.status is TaskStatus.RUNNING
        a = await manager.task(
            p1, "[429:1] falls back", AGENT, "fallback", model="inprocess/inprocess"
        )

        async def held() -> bool:
            t = await manager.store.get(a.id)
            return t is not None and t.status is TaskStatus.QUEUED and t.model == "small/tiny"

        await until(held, 10, "the fallback waiting for its model's slot")
        await asyncio.sleep(0.3)
        assert await status_of(manager, a.id) is TaskStatus.QUEUED
        out = await run_tool(manager, p1, "asyncagents_output", {"task_id": a.id})
        assert out.splitlines()[1] == (
            "Waiting in the queue: position 1 in the queue; 1/1 running on model small/tiny "
            "(max_running_per_model)."
        )
        provider.gate("t").set()
        await wait_status(manager, a.id, TaskStatus.COMPLETED, "the fallback answered")
        final = await stored(manager, a.id)
        assert final.tries == ["inprocess/inprocess", "small/tiny"]


async def test_a_cancel_ends_a_waiting_try_and_nothing_more_is_sent(
    backend: InProcessBackend, store: TaskStore, provider: Provider
) -> None:
    async with started(backend, store, retry_initial=0.5, retry_max=0.5) as manager:
        parent = await session(backend)
        a = await manager.task(parent, "[429:1] work", AGENT, "cancelled while waiting")

        async def waits() -> bool:
            t = await manager.store.get(a.id)
            return t is not None and t.status is TaskStatus.QUEUED and bool(t.tries)

        await until(waits, 10, "the try again waiting")
        text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": a.id})
        assert text == f"Cancelled background task `{a.id}`: cancelled while waiting"
        await asyncio.sleep(1.0)  # past the backoff: nothing is admitted or sent
        final = await stored(manager, a.id)
        assert final.status is TaskStatus.CANCELLED
        assert provider.prompts() == ["[429:1] work"]
        a.session_id = await session_of(manager, a.id)
        assert user_texts(await backend.messages(a.session_id)) == ["[429:1] work"]
