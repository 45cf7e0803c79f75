"""Tries again after a retryable provider error, fallbacks, and OpenCode's own retry shown
(in-process backend, both stores)."""

from __future__ import annotations

import asyncio
import re

import pytest
from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    ProviderError,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
)
from asyncagents.tasks.backend import JSON
from asyncagents.tasks.models import now_ms
from asyncagents.tasks.notices import notice_tag
from asyncagents.tasks.retries import (
    attempts_line,
    backoff,
    is_retryable,
    plan_retry,
    retry_after,
)
from asyncagents.tasks.store import TaskStore
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import session_of, until

A = "inprocess/inprocess"
B = "small/tiny"

ZERO = "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."


def _providers() -> JSON:
    return {
        "providers": [
            {"id": "inprocess", "models": {"inprocess": {"id": "inprocess"}}},
            {"id": "small", "models": {"tiny": {"id": "tiny"}}},
        ],
        "default": {},
    }


class Provider:
    """Answers 429 `fail` times (or always on the models in `down`), else a reply."""

    def __init__(self, fail: int = 0, down: tuple[str, ...] = (), status: int = 429) -> None:
        self.fail = fail
        self.down = down
        self.status = status
        self.calls: list[str] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def __call__(self, turn: InProcessTurn) -> str:
        model = turn.user_message["info"]["model"]
        name = f"{model['providerID']}/{model['modelID']}"
        self.calls.append(name)
        await self.hold.wait()
        if len(self.calls) <= self.fail or name in self.down:
            raise ProviderError("Rate limited: slow down", self.status)
        return f"Reply to: {turn.prompt} on {name}"


def _config(**kw: object) -> TaskManagerConfig:
    base = {
        "poll_interval": 0.2,
        "notice_retry_initial": 0.05,
        "wake": "never",
        "retry_initial": 0.05,
        "retry_max": 0.2,
    }
    return TaskManagerConfig.model_validate({**base, **kw})


async def _run(
    provider: Provider, store: TaskStore, prompt: str, **kw: object
) -> tuple[TaskManager, InProcessBackend, str]:
    backend = InProcessBackend(provider)
    backend.providers_body = _providers()
    manager = TaskManager(backend, store, _config(**kw))
    await manager.start()
    await asyncio.wait_for(manager.events.connected.wait(), 5)
    parent = str((await backend.create_session(title="p"))["id"])
    return manager, backend, parent


def _ntc(text: str) -> str:
    found = re.search(r"ntc_[0-9a-f]+", text)
    assert found
    return found.group(0)


async def _final(manager: TaskManager, task_id: str) -> None:
    async def ended() -> bool:
        task = await manager.store.get(task_id)
        return task is not None and not task.status.pending

    await until(ended, 10, "the task's end")


def _user_texts(messages: list[JSON]) -> list[str]:
    return [m["parts"][0]["text"] for m in messages if m["info"]["role"] == "user"]


async def test_a_429_twice_is_tried_again_and_the_parent_is_told_once(store: TaskStore) -> None:
    provider = Provider(fail=2)
    manager, backend, parent = await _run(provider, store, "x")
    try:
        task = await manager.task(parent, "work", "explore", "flaky provider", model=A)
        await _final(manager, task.id)
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.COMPLETED
        assert final.result == f"Reply to: work on {A}"
        assert final.tries == [A, A, A]
        assert provider.calls == [A, A, A]
        assert final.session_id
        messages = await backend.messages(final.session_id)
        # each try is a new user message after the failed one: no completed turn is repeated
        assert _user_texts(messages) == ["work", "work", "work"]
        errors = [
            m["info"]["error"]["data"]["statusCode"] for m in messages if m["info"].get("error")
        ]
        assert errors == [429, 429]
        out = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
        assert out == (
            f"Task `{task.id}` [completed] explore on {A}: flaky provider\n"
            f"Attempts: 3 (3 on {A})\n\nResult:\nReply to: work on {A}\n{ZERO}"
        )
        listed = await run_tool(manager, parent, "asyncagents_list", {})
        assert listed.splitlines()[1] == (
            f"- `{task.id}` [completed] explore on {A}: flaky provider (3 attempts) "
            "(0 tokens, $0.00)"
        )
        await until(lambda: _count(backend, parent, 1), 5, "the notice")
        await asyncio.sleep(0.3)
        (notice,) = await notices_in(backend, parent)
        assert notice == (
            f"{notice_tag(_ntc(notice))}\nBackground task `{task.id}` completed: flaky provider\n"
            f"Model: {A}\nAttempts: 3 (3 on {A})\nResult:\nReply to: work on {A}\n\n"
            f'Read it again with `asyncagents_output(task_id="{task.id}")`. Continue it with '
            f'`asyncagents_task(resume="{task.id}", prompt=...)`.\n{ZERO}\n\n'
            "You have no background tasks still running."
        )
    finally:
        await manager.close()


async def _count(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def test_a_fallback_model_finishes_after_the_first_fails_three_times(
    store: TaskStore,
) -> None:
    provider = Provider(down=(A,))
    manager, backend, parent = await _run(provider, store, "x", fallback_models=(B,))
    try:
        task = await manager.task(parent, "work", "explore", "fallback", model=A)
        await _final(manager, task.id)
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.COMPLETED
        assert provider.calls == [A, A, A, B]
        assert final.model == B and final.result == f"Reply to: work on {B}"
        await until(lambda: _count(backend, parent, 1), 5, "the notice")
        (notice,) = await notices_in(backend, parent)
        assert f"\nModel: {B}\nAttempts: 4 (3 on {A}, 1 on {B})\nResult:\n" in notice
    finally:
        await manager.close()


async def test_when_every_try_fails_the_task_ends_in_error_with_its_attempts(
    store: TaskStore,
) -> None:
    provider = Provider(down=(A, B))
    manager, backend, parent = await _run(provider, store, "x", attempts=2, fallback_models=(B,))
    try:
        task = await manager.task(parent, "work", "explore", "all down", model=A)
        await _final(manager, task.id)
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.ERROR
        assert provider.calls == [A, A, B, B]
        assert final.error == "APIError: Rate limited: slow down"
        await until(lambda: _count(backend, parent, 1), 5, "the notice")
        await asyncio.sleep(0.3)
        (notice,) = await notices_in(backend, parent)
        assert notice == (
            f"{notice_tag(_ntc(notice))}\nBackground task `{task.id}` failed: all down\n"
            f"Model: {B}\nAttempts: 4 (2 on {A}, 2 on {B})\n"
            "Error: APIError: Rate limited: slow down\n"
            f'Read it again with `asyncagents_output(task_id="{task.id}")`. Start a new '
            f"asyncagents_task to try again.\n{ZERO}\n\nYou have no background tasks still "
            "running."
        )
    finally:
        await manager.close()


async def test_a_non_retryable_error_ends_the_task_at_once(store: TaskStore) -> None:
    provider = Provider(down=(A,), status=400)
    manager, _, parent = await _run(provider, store, "x", fallback_models=(B,))
    try:
        task = await manager.task(parent, "work", "explore", "bad request", model=A)
        await _final(manager, task.id)
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.ERROR
        assert provider.calls == [A] and final.tries == []
    finally:
        await manager.close()


async def test_opencodes_own_retry_is_shown_and_never_taken_for_a_stall(
    store: TaskStore,
) -> None:
    provider = Provider()
    provider.hold.clear()
    manager, backend, parent = await _run(provider, store, "x", stall_timeout=0.3)
    try:
        task = await manager.task(parent, "work", "explore", "retrying")
        await until(lambda: bool(provider.calls), 5, "the turn running")
        next_ms = now_ms() + 30_000
        backend.publish(
            "session.status",
            {
                "sessionID": await session_of(manager, task.id),
                "status": {
                    "type": "retry",
                    "attempt": 2,
                    "message": "Rate limited",
                    "next": next_ms,
                },
            },
        )
        await asyncio.sleep(1.0)  # past the stall timeout: the session is busy, so alive
        out = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
        lines = out.splitlines()
        assert lines[0] == f"Task `{task.id}` [running] explore: retrying"
        assert re.fullmatch(
            r"OpenCode is retrying the provider: attempt 2 \(Rate limited\), next try in "
            r"(29|30)s\.",
            lines[2],
        ), lines
        listed = await run_tool(manager, parent, "asyncagents_list", {})
        assert listed.splitlines()[1] == (
            f"- `{task.id}` [running] explore: retrying (OpenCode retrying the provider: attempt 2)"
            " (0 tokens, $0.00)"
        )
        provider.hold.set()
        await _final(manager, task.id)
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.COMPLETED
        assert final.progress.provider_retries == 2 and final.progress.model == A
        out = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
        assert out.splitlines()[:2] == [
            f"Task `{task.id}` [completed] explore: retrying",
            f"Attempts: 1 (1 on {A}); OpenCode retried the provider 2 time(s) in the last one",
        ]
    finally:
        await manager.close()


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        ({"name": "APIError", "data": {"message": "x", "statusCode": 429}}, True),
        ({"name": "APIError", "data": {"message": "x", "statusCode": 503}}, True),
        ({"name": "APIError", "data": {"message": "x", "isRetryable": True}}, True),
        ({"name": "APIError", "data": {"message": "Overloaded", "statusCode": 529}}, True),
        ({"name": "APIError", "data": {"message": "provider overloaded"}}, True),
        ({"name": "APIError", "data": {"message": "bad", "statusCode": 400}}, False),
        ({"name": "ProviderAuthError", "data": {"message": "no key"}}, False),
        ({"name": "ContextOverflowError", "data": {"message": "too long"}}, False),
        ({"name": "MessageAbortedError", "data": {"message": "Aborted"}}, False),
        (None, False),
    ],
)
def test_which_errors_are_retryable(error: object, retryable: bool) -> None:
    assert is_retryable(error) is retryable


def test_retry_after_backoff_and_plan() -> None:
    def err(headers: dict[str, str]) -> JSON:
        return {"name": "APIError", "data": {"statusCode": 429, "responseHeaders": headers}}

    assert retry_after(err({"Retry-After": "12"})) == 12.0
    assert retry_after(err({"retry-after-ms": "1500"})) == 1.5
    assert retry_after(err({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}), now=1445412470) == 10
    assert retry_after(err({})) is None
    assert retry_after(err({"retry-after": "soon"})) is None
    assert [backoff(n, 30, 300, None) for n in (1, 2, 3, 5)] == [30, 60, 120, 300]
    assert backoff(1, 30, 300, 90) == 90
    e = err({"retry-after": "45"})
    plan = dict(attempts=3, fallback_models=("b/b",), initial=30.0, longest=300.0)
    first = plan_retry(e, "a/a", ["a/a"], **plan)  # type: ignore[arg-type]
    assert first is not None and (first.model, first.delay) == ("a/a", 45)
    fallback = plan_retry(e, "a/a", ["a/a"] * 3, **plan)  # type: ignore[arg-type]
    assert fallback is not None and fallback.model == "b/b"
    again = plan_retry(e, "b/b", ["a/a"] * 3 + ["b/b"], **plan)  # type: ignore[arg-type]
    assert again is not None and again.model == "b/b"
    assert plan_retry(e, "b/b", ["a/a"] * 3 + ["b/b"] * 3, **plan) is None  # type: ignore[arg-type]
    bad = {"name": "APIError", "data": {"statusCode": 400}}
    assert plan_retry(bad, "a/a", ["a/a"], **plan) is None  # type: ignore[arg-type]
    assert attempts_line([None, None, "b/b"]) == (
        "Attempts: 3 (2 on the server's default model, 1 on b/b)"
    )


async def test_a_queued_follow_up_waits_for_the_try_again(store: TaskStore) -> None:
    provider = Provider(fail=1)
    provider.hold.clear()
    manager, backend, parent = await _run(provider, store, "x")
    try:
        task = await manager.task(parent, "work", "explore", "retry then follow-up", model=A)
        await until(lambda: bool(provider.calls), 5, "the turn running")
        await manager.task(parent, "and then", resume=task.id, when="after_current")
        provider.hold.set()

        async def done() -> bool:
            current = await manager.store.get(task.id)
            return current is not None and current.resume_count == 1 and not current.status.pending

        await until(done, 10, "the follow-up answered")
        final = await manager.store.get(task.id)
        assert final is not None and final.status is TaskStatus.COMPLETED
        assert final.result == f"Reply to: and then on {A}" and final.tries == []
        assert final.session_id
        assert _user_texts(await backend.messages(final.session_id)) == ["work", "work", "and then"]
        await until(lambda: _count(backend, parent, 2), 5, "two notices")
        first, second = await notices_in(backend, parent)
        assert f"Attempts: 2 (2 on {A})\nResult:\nReply to: work on {A}" in first
        assert "Attempts:" not in second
    finally:
        await manager.close()


async def test_a_blocking_read_waits_through_the_tries(store: TaskStore) -> None:
    provider = Provider(fail=2)
    manager, _, parent = await _run(provider, store, "x", retry_initial=0.3, retry_max=0.3)
    try:
        task = await manager.task(parent, "work", "explore", "blocking", model=A)
        out = await manager.output(task.id, block=True, timeout=10)
        assert not out.timed_out
        assert out.task.status is TaskStatus.COMPLETED and len(out.task.tries) == 3
    finally:
        await manager.close()
