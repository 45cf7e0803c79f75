"""The admission queue and depth through the manager and the tools, over the in-process backend:
caps, the texts an agent sees when a task waits (exact), cancel and clear of queued tasks, the
next task admitted at once when one ends, forks built when asked for, and trees of tasks."""

from __future__ import annotations

import asyncio
import re

import pytest
from asyncagents.tasks import (
    TOOL_NAMES,
    InProcessBackend,
    InProcessTurn,
    TaskManager,
    TaskManagerConfig,
    TaskStatus,
    TaskStore,
    run_tool,
)
from polling import session_of, until

AGENT = "explore"


class Gates:
    """Replies ``Reply to: <prompt>``; a prompt holding ``[gate:NAME]`` waits until that gate
    opens. Records the order turns started in."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def open(self, name: str) -> None:
        self.gate(name).set()

    async def __call__(self, turn: InProcessTurn) -> str:
        self.started.append(turn.prompt)
        for name in re.findall(r"\[gate:([a-z0-9_]+)\]", turn.prompt):
            await self.gate(name).wait()
        return "Reply to: " + turn.prompt


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def backend(gates: Gates) -> InProcessBackend:
    return InProcessBackend(gates)


def config(**kw: object) -> TaskManagerConfig:
    base: dict[str, object] = {"poll_interval": 0.2, "wake": "never", "max_running": 2}
    # a long safety-net interval: what starts a task in these tests is the direct path
    base["admission_interval"] = 60.0
    return TaskManagerConfig.model_validate({**base, **kw})


async def new_session(backend: InProcessBackend) -> str:
    return str((await backend.create_session(title="parent"))["id"])


async def launch(manager: TaskManager, parent: str, prompt: str, **extra: object) -> str:
    return await run_tool(
        manager,
        parent,
        "asyncagents_task",
        {"prompt": prompt, "agent": AGENT, "description": "a job", **extra},
    )


_COUNTS = "0 tokens (input 0, output 0, reasoning 0, cache read 0, cache write 0), $0.00"
NO_USAGE = f"Usage: {_COUNTS}."
NO_USAGE_RESUMED = f"Usage: this turn {_COUNTS}; all turns {_COUNTS}."


def task_id_of(text: str) -> str:
    found = re.search(r"tsk_[0-9a-f]+", text)
    assert found, text
    return found.group(0)


def wait_hint(task_id: str) -> str:
    return f'To wait for it now, call `asyncagents_output(task_id="{task_id}", block=true)`.'


def started_text(task_id: str) -> str:
    return (
        f"Background task started: `{task_id}`\nAgent: {AGENT}\nDescription: a job\n"
        "Status: running\nYou will get a notice in this session when it completes or fails; "
        f"continue with other work meanwhile. {wait_hint(task_id)}"
    )


def queued_text(task_id: str, state: str, marks: str = "") -> str:
    return (
        f"Background task queued: `{task_id}`{marks} ({state})\nAgent: {AGENT}\n"
        "Description: a job\nStatus: queued\nIt starts by itself when a slot frees, and you "
        "will get a notice in this session when it completes or fails; continue with other "
        f"work meanwhile. {wait_hint(task_id)}"
    )


async def test_max_running_queues_the_rest_with_its_place_and_runs_them_in_order(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    async with TaskManager(backend, store, config()) as manager:
        texts = [await launch(manager, parent, f"[gate:g{i}] job {i}") for i in range(4)]
        ids = [task_id_of(t) for t in texts]
        assert texts[0] == started_text(ids[0])
        assert texts[1] == started_text(ids[1])
        assert texts[2] == queued_text(
            ids[2], "position 1 in the queue; 2/2 running on this server (max_running)"
        )
        assert texts[3] == queued_text(
            ids[3], "position 2 in the queue; 2/2 running on this server (max_running)"
        )
        statuses = [(await manager.output(i)).task.status for i in ids]
        assert statuses == [TaskStatus.RUNNING] * 2 + [TaskStatus.QUEUED] * 2
        output = await run_tool(manager, parent, "asyncagents_output", {"task_id": ids[3]})
        assert output == (
            f"Task `{ids[3]}` [queued] {AGENT}: a job\nWaiting in the queue: position 2 in the "
            "queue; 2/2 running on this server (max_running).\nThe task starts by itself: "
            "continue with other work (you will get a notice), or call asyncagents_output "
            f"again with block=true to wait.\n{NO_USAGE}"
        )
        listing = await run_tool(manager, parent, "asyncagents_list", {"status": "queued"})
        assert listing == (
            "Background tasks (newest first):\n"
            f"- `{ids[3]}` [queued] {AGENT}: a job (0 tokens, $0.00)\n"
            f"- `{ids[2]}` [queued] {AGENT}: a job (0 tokens, $0.00)"
        )
        # a queued task's session was never sent a prompt
        assert [
            sid for sid, _ in backend.prompts if sid == (await store.get(ids[2])).session_id
        ] == []  # type: ignore[union-attr]
        for i in range(4):
            gates.open(f"g{i}")
        for task_id in ids:
            out = await manager.output(task_id, block=True, timeout=10)
            assert out.task.status is TaskStatus.COMPLETED
        # the first two were admitted together (each prompt follows its own session's
        # creation, so either may go first); the queued ones in their order
        assert sorted(gates.started[:2]) == ["[gate:g0] job 0", "[gate:g1] job 1"]
        assert gates.started[2:] == ["[gate:g2] job 2", "[gate:g3] job 3"]


async def test_an_ended_task_admits_the_next_at_once_not_at_the_next_poll(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    cfg = config(max_running=1, poll_interval=30.0)
    async with TaskManager(backend, store, cfg) as manager:
        first = task_id_of(await launch(manager, parent, "[gate:a] first"))
        second = task_id_of(await launch(manager, parent, "second"))
        assert (await manager.output(second)).task.status is TaskStatus.QUEUED
        loop = asyncio.get_running_loop()
        begin = loop.time()
        gates.open("a")
        # the end of the first is seen from the event stream, the second admitted right away
        out = await manager.output(second, block=True, timeout=10)
        assert out.task.status is TaskStatus.COMPLETED
        assert loop.time() - begin < 3.0  # poll_interval and admission_interval are 30 s, 60 s
        assert (await manager.output(first)).task.status is TaskStatus.COMPLETED


async def test_cancel_and_clear_of_queued_tasks(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    async with TaskManager(backend, store, config(max_running=1)) as manager:
        running = task_id_of(await launch(manager, parent, "[gate:a] running"))
        queued = task_id_of(await launch(manager, parent, "[gate:b] queued"))
        await until(lambda: gates.started == ["[gate:a] running"])
        text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": queued})
        assert text == f"Cancelled background task `{queued}`: a job"
        task = (await manager.output(queued)).task
        assert task.status is TaskStatus.CANCELLED and task.error == "cancelled by the parent"
        again = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": queued})
        assert again.startswith(f"Error: Task `{queued}` is cancelled, not running")
        third = task_id_of(await launch(manager, parent, "third"))
        # no prompt ever reached the sessions of the two queued tasks
        assert [b["parts"][0]["text"] for _, b in backend.prompts] == ["[gate:a] running"]
        cleared = await run_tool(manager, parent, "asyncagents_clear", {})
        assert cleared == "Cleared 3 background task(s); 1 running one(s) aborted."
        await asyncio.sleep(0.2)
        assert await store.get(third) is None and await store.get(running) is None
        assert gates.started == ["[gate:a] running"]


async def test_max_queued_per_parent_refuses_with_a_text_and_leaves_no_session(
    backend: InProcessBackend, store: TaskStore
) -> None:
    parent = await new_session(backend)
    other = await new_session(backend)
    cfg = config(max_running=1, max_queued_per_parent=2)
    async with TaskManager(backend, store, cfg) as manager:
        for i in range(3):
            await session_of(
                manager, task_id_of(await launch(manager, parent, f"[gate:x] job {i}"))
            )
        sessions = set(backend.session_ids())
        text = await launch(manager, parent, "one too many")
        assert text == (
            "Error: Not started: this session already has 2 background tasks waiting in the "
            "queue (max_queued_per_parent 2). Wait for some to finish, or cancel some with "
            "asyncagents_cancel, then try again."
        )
        assert set(backend.session_ids()) == sessions
        assert len(await manager.list(parent)) == 3
        # another parent has its own count
        assert "queued" in await launch(manager, other, "[gate:x] theirs")


async def test_per_parent_agent_and_model_caps_name_themselves_in_the_text(
    backend: InProcessBackend, store: TaskStore
) -> None:
    parent = await new_session(backend)
    other = await new_session(backend)
    cfg = config(
        max_running=10,
        max_running_per_parent=1,
        max_running_per_agent={"plan": 1},
        max_running_per_model={"prov/big": 2},
        model={"providerID": "prov", "modelID": "big"},
    )
    async with TaskManager(backend, store, cfg) as manager:
        await launch(manager, parent, "[gate:x] one")
        text = await launch(manager, parent, "[gate:x] two")
        assert text == queued_text(
            task_id_of(text),
            "position 1 in the queue; 1/1 running for this session (max_running_per_parent)",
        )
        planned = await run_tool(
            manager,
            other,
            "asyncagents_task",
            {"prompt": "[gate:x] p1", "agent": "plan", "description": "a job"},
        )
        assert "Status: running" in planned
        third = await new_session(backend)
        text = await run_tool(
            manager,
            third,
            "asyncagents_task",
            {"prompt": "[gate:x] p2", "agent": "plan", "description": "a job"},
        )
        tid = task_id_of(text)
        # two run on prov/big already: the model's cap is full too; the agent's is named
        # first (the narrower caps follow the wider: server, session, agent, model). A parent
        # never served goes first in the round robin: position 1, before `two`
        assert text.startswith(
            f"Background task queued: `{tid}` (position 1 in the queue; 1/1 running with agent "
            "plan (max_running_per_agent))\nAgent: plan\n"
        )
        fourth = await new_session(backend)
        text = await launch(manager, fourth, "[gate:x] m")
        assert text == queued_text(
            task_id_of(text),
            "position 2 in the queue; 2/2 running on model prov/big (max_running_per_model)",
        )
        task = (await manager.output(task_id_of(text))).task
        assert task.model == "prov/big"


async def test_a_queued_follow_up_and_its_texts(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    async with TaskManager(backend, store, config(max_running=1)) as manager:
        first = task_id_of(await launch(manager, parent, "first"))
        await manager.output(first, block=True, timeout=10)
        task_id_of(await launch(manager, parent, "[gate:a] busy"))
        text = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "more", "resume": first}
        )
        assert text == (
            f"Follow-up queued for background task `{first}` (resumed) ({AGENT}): a job "
            "(position 1 in the queue; 1/1 running on this server (max_running))\n"
            "Status: queued. It is sent by itself when a slot frees; you will get a notice "
            f"with its full response when it answers. {wait_hint(first)}"
        )
        again = await run_tool(
            manager, parent, "asyncagents_task", {"prompt": "more", "resume": first}
        )
        assert again.startswith(f"Error: Task `{first}` is currently being resumed")
        output = await run_tool(manager, parent, "asyncagents_output", {"task_id": first})
        assert output == (
            f"Task `{first}` (resumed) [queued] {AGENT}: a job\nWaiting in the queue: position 1 "
            "in the queue; 1/1 running on this server (max_running).\nThe follow-up starts by "
            "itself: continue with other work (you will get a notice), or call "
            f"asyncagents_output again with block=true to wait.\n{NO_USAGE_RESUMED}"
        )
        gates.open("a")
        out = await manager.output(first, block=True, timeout=10)
        assert out.task.status is TaskStatus.COMPLETED and out.task.result == "Reply to: more"
        # a cancelled queued follow-up leaves the task completed with its last result
        task_id_of(await launch(manager, parent, "[gate:b] busy again"))
        await run_tool(manager, parent, "asyncagents_task", {"prompt": "x", "resume": first})
        text = await run_tool(manager, parent, "asyncagents_cancel", {"task_id": first})
        assert text.startswith(f"Cancelled the follow-up of background task `{first}` (resumed)")
        task = (await manager.output(first)).task
        assert task.status is TaskStatus.COMPLETED and task.result == "Reply to: more"
        gates.open("b")


async def test_a_fork_carries_the_context_of_when_it_was_asked_for(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    backend.add_message(parent, "user", "the context before the fork")
    async with TaskManager(backend, store, config(max_running=1)) as manager:
        busy = task_id_of(await launch(manager, parent, "[gate:a] busy"))
        text = await launch(manager, parent, "forked work", fork=True)
        forked = task_id_of(text)
        # both its fork and its slot are pending: the cap is what the text names
        assert text in (
            queued_text(
                forked,
                "position 1 in the queue; 1/1 running on this server (max_running)",
                " (forked)",
            ),
        )
        await until(lambda: _fork_ready(store, forked), what="fork prepared")
        backend.add_message(parent, "user", "said after the fork was asked for")
        gates.open("a")
        out = await manager.output(forked, block=True, timeout=10)
        assert out.task.status is TaskStatus.COMPLETED and out.task.fork_stats is not None
        whole = str(await manager.messages(forked, full_session=True))
        assert "the context before the fork" in whole
        assert "said after the fork was asked for" not in whole
        assert (await manager.output(busy)).task.status is TaskStatus.COMPLETED


async def _fork_ready(store: TaskStore, task_id: str) -> bool:
    task = await store.get(task_id)
    return task is not None and not task.fork_pending


async def test_a_fork_with_a_free_slot_starts_at_once_its_prompt_after_its_context(
    backend: InProcessBackend, store: TaskStore
) -> None:
    parent = await new_session(backend)
    backend.add_message(parent, "user", "some context")
    async with TaskManager(backend, store, config(max_running=1)) as manager:
        text = await launch(manager, parent, "forked work", fork=True)
        forked = task_id_of(text)
        assert text == started_text(forked).replace(f"{forked}`", f"{forked}` (forked)", 1)
        out = await manager.output(forked, block=True, timeout=10)
        assert out.task.status is TaskStatus.COMPLETED and out.task.fork_stats is not None
        assert out.task.session_id is not None
        child = await backend.messages(out.task.session_id)
        assert [m["info"]["role"] for m in child] == ["user", "user", "assistant"]
        assert "<inherited_context>" in str(child[0]["parts"])
        assert child[1]["parts"][0]["text"] == "forked work"


async def test_depth_one_refuses_a_child_and_keeps_its_tools_off(
    backend: InProcessBackend, store: TaskStore
) -> None:
    parent = await new_session(backend)
    async with TaskManager(backend, store, config()) as manager:
        child = task_id_of(await launch(manager, parent, "work"))
        task = (await manager.output(child, block=True, timeout=10)).task
        assert (task.depth, task.root_session_id) == (1, parent)
        [(_, body)] = [(s, b) for s, b in backend.prompts if s == task.session_id]
        assert body["tools"] == dict.fromkeys(TOOL_NAMES, False)
        assert task.session_id is not None
        text = await launch(manager, task.session_id, "a grandchild")
        assert text == (
            "Error: Not started: this session is a background task at depth 1, and tasks may "
            "nest only 1 level(s) deep (max_depth 1). Do the work yourself, or report back to "
            "your parent so it can start the task."
        )


async def test_depth_two_lets_a_child_start_tasks_and_the_tree_is_known(
    backend: InProcessBackend, store: TaskStore
) -> None:
    root = await new_session(backend)
    async with TaskManager(backend, store, config(max_depth=2, max_running=5)) as manager:
        child_id = task_id_of(await launch(manager, root, "c"))
        child = (await manager.output(child_id, block=True, timeout=10)).task
        assert child.session_id is not None
        [(_, body)] = [(s, b) for s, b in backend.prompts if s == child.session_id]
        assert "tools" not in body  # nothing switched off: the child may call the task tools
        grandchild_text = await launch(manager, child.session_id, "g")
        grandchild_id = task_id_of(grandchild_text)
        grandchild = (await manager.output(grandchild_id, block=True, timeout=10)).task
        assert (grandchild.depth, grandchild.root_session_id) == (2, root)
        assert grandchild.parent_session_id == child.session_id
        [(_, body)] = [(s, b) for s, b in backend.prompts if s == grandchild.session_id]
        assert body["tools"] == dict.fromkeys(TOOL_NAMES, False)
        assert grandchild.session_id is not None
        refused = await launch(manager, grandchild.session_id, "too deep")
        assert refused.startswith("Error: Not started: this session is a background task at "
                                  "depth 2, and tasks may nest only 2 level(s) deep")  # fmt: skip
        assert [t.id for t in await manager.tree(child.id)] == [grandchild.id]
        assert await manager.tree(grandchild.id) == []
        assert [t.id for t in await manager.store.descendants(root)] == [child.id, grandchild.id]


async def test_listeners_hear_a_queued_task_created_then_admitted(
    backend: InProcessBackend, store: TaskStore, gates: Gates
) -> None:
    parent = await new_session(backend)
    async with TaskManager(backend, store, config(max_running=1)) as manager:
        seen: list[tuple[str, str, TaskStatus]] = []
        manager.add_listener(lambda c: seen.append((c.kind, c.task.id, c.task.status)))
        first = task_id_of(await launch(manager, parent, "[gate:a] first"))
        second = task_id_of(await launch(manager, parent, "second"))
        gates.open("a")
        await manager.output(second, block=True, timeout=10)
        mine = [(kind, status) for kind, task_id, status in seen if task_id == second]
        assert mine[:3] == [
            ("task.created", TaskStatus.QUEUED),
            ("task.updated", TaskStatus.QUEUED),  # its child session was created
            ("task.updated", TaskStatus.RUNNING),  # admitted when the first ended
        ]
        assert ("task.completed", TaskStatus.COMPLETED) in mine
        assert next(k for k, t, _ in seen if t == first) == "task.created"
