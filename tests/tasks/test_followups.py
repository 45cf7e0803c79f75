"""Follow-ups to a running task: queued (``after_current``), interrupting (``now``), in order,
durable across a takeover, dropped by a cancel or a failure (in-process backend)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    ProviderError,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    TaskNotCompletedError,
    TaskStatus,
)
from asyncagents.tasks.notices import notice_tag
from asyncagents.tasks.tools import run_tool
from parent_notices import notices_in
from polling import until
from tasks_script import Script


def _texts(messages: list[dict[str, object]], role: str) -> list[str]:
    out = []
    for message in messages:
        info = message["info"]
        assert isinstance(info, dict)
        if info.get("role") == role:
            parts = message["parts"]
            assert isinstance(parts, list)
            out.append("".join(str(p.get("text", "")) for p in parts))
    return out


async def _queue(manager: TaskManager, parent: str, task_id: str, prompt: str, when: str) -> str:
    return await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": prompt, "resume": task_id, "when": when},
    )


def _ntc(text: str) -> str:
    found = re.search(r"ntc_[0-9a-f]+", text)
    assert found
    return found.group(0)


async def test_queued_follow_ups_run_in_order_each_with_its_notice(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] first", "explore", "chain")
    await until(lambda: bool(script.seen))
    text = await _queue(manager, parent, task.id, "second", "after_current")
    assert text == (
        f"Follow-up queued for background task `{task.id}`: chain\nIt is sent when the running "
        "turn ends (1 follow-up(s) queued). You will get a notice with its response."
    )
    text = await _queue(manager, parent, task.id, "third", "after_current")
    assert text == (
        f"Follow-up queued for background task `{task.id}`: chain\nIt is sent when the running "
        "turn ends (2 follow-up(s) queued). You will get a notice with its response."
    )
    out = await run_tool(manager, parent, "asyncagents_output", {"task_id": task.id})
    assert out.splitlines()[-3] == "2 queued follow-up(s) are sent when this turn ends."
    # without `when`, a running task is refused as before
    refused = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "x", "resume": task.id}
    )
    assert refused == f"Error: {TaskNotCompletedError(task.id, 'running')}"
    script.release.set()

    async def all_answered() -> bool:
        current = await manager.store.get(task.id)
        return (
            current is not None
            and current.status is TaskStatus.COMPLETED
            and current.resume_count == 2
        )

    await until(all_answered, 10, "both follow-ups answered")
    final = await manager.store.get(task.id)
    assert final is not None
    assert final.result == "Reply to: third" and final.pending_followups == []
    assert final.turn == 3 and final.last_prompt == "third"
    assert final.session_id
    child = await backend.messages(final.session_id)
    assert _texts(child, "user") == ["[hold] first", "second", "third"]
    assert _texts(child, "assistant") == [
        "Reply to: [hold] first",
        "Reply to: second",
        "Reply to: third",
    ]
    await until(lambda: _has(backend, parent, 3), 10, "three notices")
    notices = await notices_in(backend, parent)
    assert len(notices) == 3
    assert notices[0].startswith(
        f"{notice_tag(_ntc(notices[0]))}\nBackground task `{task.id}` completed: chain\n"
        "Result:\nReply to: [hold] first"
    )
    assert notices[1].startswith(
        f"{notice_tag(_ntc(notices[1]))}\nBackground task `{task.id}` (resumed) answered your "
        "follow-up: chain\nFull response:\nReply to: second"
    )
    assert notices[2].startswith(
        f"{notice_tag(_ntc(notices[2]))}\nBackground task `{task.id}` (resumed) answered your "
        "follow-up: chain\nFull response:\nReply to: third"
    )


async def _has(backend: InProcessBackend, parent: str, n: int) -> bool:
    return len(await notices_in(backend, parent)) >= n


async def test_now_aborts_the_running_turn_and_sends_the_follow_up(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] long work", "explore", "steer")
    await until(lambda: bool(script.seen))
    await _queue(manager, parent, task.id, "later one", "after_current")
    text = await _queue(manager, parent, task.id, "change of plan", "now")
    assert text == (
        f"Follow-up for background task `{task.id}`: steer\nIts running turn is being aborted; "
        "the follow-up is sent as soon as it stops. You will get a notice with its response."
    )

    async def done() -> bool:
        current = await manager.store.get(task.id)
        return current is not None and current.status is TaskStatus.COMPLETED

    await until(done, 10, "the follow-ups answered")
    final = await manager.store.get(task.id)
    assert final is not None and final.result == "Reply to: later one"
    assert final.resume_count == 2
    assert final.session_id
    child = await backend.messages(final.session_id)
    assert _texts(child, "user") == ["[hold] long work", "change of plan", "later one"]
    aborted = [m["info"] for m in child if m["info"].get("error")]
    assert [e["error"]["name"] for e in aborted] == ["MessageAbortedError"]
    await until(lambda: _has(backend, parent, 2), 10, "two notices")
    await asyncio.sleep(0.3)
    notices = await notices_in(backend, parent)
    # the aborted turn has no notice: each follow-up has its own
    assert len(notices) == 2
    assert "Full response:\nReply to: change of plan" in notices[0]
    assert "Full response:\nReply to: later one" in notices[1]


async def test_cancel_drops_the_queued_follow_ups_and_says_how_many(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    task = await manager.task(parent, "[hold] work", "explore", "to cancel")
    await until(lambda: bool(script.seen))
    await _queue(manager, parent, task.id, "one", "after_current")
    await _queue(manager, parent, task.id, "two", "after_current")
    text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": task.id})
    assert text == (
        f"Cancelled background task `{task.id}`: to cancel\n"
        "Dropped 2 queued follow-up(s); they were not sent."
    )
    current = await manager.store.get(task.id)
    assert current is not None
    assert current.status is TaskStatus.CANCELLED and current.pending_followups == []
    script.release.set()
    await asyncio.sleep(0.3)
    assert current.session_id
    assert _texts(await backend.messages(current.session_id), "user") == ["[hold] work"]


async def test_a_failed_turn_drops_its_queued_follow_ups_in_its_notice(
    manager: TaskManager, backend: InProcessBackend, parent: str, script: Script
) -> None:
    async def hold_then_fail(turn: InProcessTurn) -> str:
        script.seen.append(turn)
        await script.release.wait()
        raise ProviderError("Invalid request: rejected by the provider")

    backend.responder = hold_then_fail
    task = await manager.task(parent, "work", "explore", "will fail")
    await until(lambda: bool(script.seen))
    text = await _queue(manager, parent, task.id, "never sent", "after_current")
    assert text.startswith("Follow-up queued for background task")
    script.release.set()
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.status is TaskStatus.ERROR and out.task.pending_followups == []
    await until(lambda: _has(backend, parent, 1), 10, "the notice")
    (notice,) = await notices_in(backend, parent)
    assert notice == (
        f"{notice_tag(_ntc(notice))}\nBackground task `{task.id}` failed: will fail\n"
        "Error: APIError: Invalid request: rejected by the provider\n"
        f'Read it again with `asyncagents_output(task_id="{task.id}")`. Start a new '
        "asyncagents_task to try again.\nDropped 1 queued follow-up(s); they were not sent.\n"
        "Usage: 0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00."
        "\n\nYou have no background tasks still running."
    )


async def test_when_without_resume_or_with_a_bad_value_is_refused(
    manager: TaskManager, parent: str
) -> None:
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "x", "agent": "a", "when": "now"}
    )
    assert text == (
        "Error: when applies only to a follow-up: give resume=<task id> with it, or leave it out."
    )
    text = await run_tool(
        manager, parent, "asyncagents_task", {"prompt": "x", "resume": "tsk_x", "when": "later"}
    )
    assert text == (
        "Error: invalid arguments for asyncagents_task:\n"
        '- when: must be "after_current" or "now" (got "later")'
    )


async def test_when_on_a_completed_task_resumes_it_at_once(
    manager: TaskManager, parent: str
) -> None:
    task = await manager.task(parent, "first", "explore", "done already")
    await manager.output(task.id, block=True, timeout=5)
    text = await _queue(manager, parent, task.id, "more", "after_current")
    assert text.startswith(f"Follow-up sent to background task `{task.id}` (resumed)")
    out = await manager.output(task.id, block=True, timeout=5)
    assert out.task.result == "Reply to: more"


async def test_a_queued_follow_up_survives_a_takeover(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    script = Script()
    backend = InProcessBackend(script)
    parent = str((await backend.create_session())["id"])
    store_a, store_b = SQLiteTaskStore(path), SQLiteTaskStore(path)
    config = TaskManagerConfig(poll_interval=0.2, wake="never", notice_interval=0.1)
    a = TaskManager(backend, store_a, config.model_copy(update={"lease_ttl": 600}))
    await a.start()
    task = await a.task(parent, "[hold] job", "explore", "handed over")
    await until(lambda: bool(script.seen))
    await _queue(a, parent, task.id, "after the takeover", "after_current")
    await a.close()
    async with TaskManager(backend, store_b, config.model_copy(update={"lease_ttl": 1.5})) as b:
        await until(lambda: b.leases.taken_over == 1, timeout=5, what="takeover")
        script.release.set()

        async def done() -> bool:
            current = await b.store.get(task.id)
            return (
                current is not None
                and current.status is TaskStatus.COMPLETED
                and current.resume_count == 1
            )

        await until(done, 10, "the follow-up answered by the new owner")
        final = await b.store.get(task.id)
        assert final is not None and final.result == "Reply to: after the takeover"
        assert final.owner == b.instance_id
    assert final.session_id
    assert _texts(await backend.messages(final.session_id), "user") == [
        "[hold] job",
        "after the takeover",
    ]
    await store_a.close()
    await store_b.close()


async def test_queued_follow_ups_are_capped_and_fit_an_event(
    manager: TaskManager, parent: str, script: Script
) -> None:
    from asyncagents.service.event_size import EVENT_TASK_BYTES, json_text
    from asyncagents.service.event_stream import event_task_json
    from asyncagents.tasks.transitions import MAX_QUEUED_FOLLOWUPS

    task = await manager.task(parent, "[hold] work", "explore", "many follow-ups")
    await until(lambda: bool(script.seen))
    big = "x" * 100_000
    for n in range(MAX_QUEUED_FOLLOWUPS):
        await manager.task(parent, f"{n} {big}", resume=task.id, when="after_current")
    text = await _queue(manager, parent, task.id, "one too many", "after_current")
    assert text == (
        f"Error: Task `{task.id}` already has 20 queued follow-ups; wait for its notices before "
        "queueing more."
    )
    stored = await manager.store.get(task.id)
    assert stored is not None and len(stored.pending_followups) == MAX_QUEUED_FOLLOWUPS
    event = event_task_json(stored)
    assert len(json_text(event)) <= EVENT_TASK_BYTES
    assert "pending_followups.0.prompt" in event["truncated"]
    assert len(event["pending_followups"]) == MAX_QUEUED_FOLLOWUPS
    await manager.cancel(task.id)
