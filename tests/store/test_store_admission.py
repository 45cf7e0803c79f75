"""The admission part of the `TaskStore` contract, on every store (memory, SQLite, PostgreSQL):
`admit` keeps every cap, in fair order, atomically across handles; `delete_queued` removes only
a task still queued; queued tasks are taken over; `descendants` walks a tree of tasks."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

from asyncagents.tasks.admission import FRESH_MS, Caps
from asyncagents.tasks.models import Task, TaskStatus, now_ms
from asyncagents.tasks.store import TaskStore
from store_records import make_task

if TYPE_CHECKING:
    from conftest import OpenStore

QUEUED, RUNNING, RESUMED = TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.RESUMED
COMPLETED = TaskStatus.COMPLETED


def queued(
    task_id: str,
    parent: str = "ses_a",
    *,
    created_at: int,
    agent: str = "general",
    model: str | None = None,
    fork_pending: bool = False,
    **fields: object,
) -> Task:
    # a new task is ready for admission once its child session exists (created after it is
    # stored): these have theirs unless a test says otherwise
    task = make_task(
        task_id, parent=parent, status=QUEUED, created_at=created_at, session_id=f"ses_{task_id}"
    )
    return task.model_copy(
        update={"agent": agent, "model": model, "fork_pending": fork_pending, **fields}
    )


async def insert_all(store: TaskStore, tasks: list[Task]) -> None:
    for task in tasks:
        await store.insert(task)


async def end(store: TaskStore, task_id: str) -> None:
    def mutate(task: Task) -> tuple[Task, None]:
        task.status = COMPLETED
        return task, None

    assert await store.update(task_id, mutate) is not None


async def test_admit_starts_what_max_running_allows_and_marks_owner_and_time(
    store: TaskStore,
) -> None:
    await store.insert(make_task("tsk_run", status=RUNNING, owner="mgr_a", created_at=1))
    await insert_all(store, [queued(f"tsk_q{i}", created_at=10 + i) for i in range(5)])
    first = await store.admit("b1", Caps(max_running=3), "mgr_b")
    assert [t.id for t in first] == ["tsk_q0", "tsk_q1"]
    for task in first:
        assert task.status is RUNNING and task.owner == "mgr_b"
        assert task.admitted_at is not None and task.turn_started_at is None
        assert await store.get(task.id) == task
    assert await store.admit("b1", Caps(max_running=3), "mgr_c") == []
    await end(store, "tsk_run")
    assert [t.id for t in await store.admit("b1", Caps(max_running=3), "mgr_c")] == ["tsk_q2"]
    # other backends' tasks are neither counted nor admitted
    await store.insert(queued("tsk_other", created_at=1).model_copy(update={"backend": "b2"}))
    assert await store.admit("b1", Caps(max_running=3), "mgr_c") == []
    assert [t.id for t in await store.admit("b2", Caps(max_running=1), "m")] == ["tsk_other"]


async def test_admit_respects_the_limit_argument(store: TaskStore) -> None:
    await insert_all(store, [queued(f"tsk_q{i}", created_at=i) for i in range(4)])
    assert len(await store.admit("b1", Caps(), "m", limit=3)) == 3
    assert len(await store.admit("b1", Caps(), "m", limit=3)) == 1


async def test_fifo_within_a_parent_round_robin_across_parents(store: TaskStore) -> None:
    """Parent a asked for 3 tasks before b asked for 3 and c for 1: with one slot, they start
    a, b, c, a, b, a, b; nobody waits for another's whole queue."""
    tasks = [queued(f"tsk_a{i}", "ses_a", created_at=10 + i) for i in range(3)]
    tasks += [queued(f"tsk_b{i}", "ses_b", created_at=20 + i) for i in range(3)]
    tasks += [queued("tsk_c0", "ses_c", created_at=30)]
    await insert_all(store, tasks)
    order = []
    for _ in range(7):
        [one] = await store.admit("b1", Caps(max_running=1), "m")
        order.append(one.id)
        await end(store, one.id)
    assert order == ["tsk_a0", "tsk_b0", "tsk_c0", "tsk_a1", "tsk_b1", "tsk_a2", "tsk_b2"]


async def test_one_pass_takes_parents_in_turn(store: TaskStore) -> None:
    tasks = [queued(f"tsk_a{i}", "ses_a", created_at=10 + i) for i in range(4)]
    tasks += [queued(f"tsk_b{i}", "ses_b", created_at=20 + i) for i in range(2)]
    await insert_all(store, tasks)
    admitted = await store.admit("b1", Caps(max_running=5), "m")
    assert [t.id for t in admitted] == ["tsk_a0", "tsk_b0", "tsk_a1", "tsk_b1", "tsk_a2"]


async def test_a_task_held_by_its_agent_or_model_cap_is_skipped_not_blocking(
    store: TaskStore,
) -> None:
    await store.insert(make_task("tsk_r1", status=RUNNING, created_at=1).model_copy(
        update={"agent": "build"}
    ))  # fmt: skip
    await store.insert(make_task("tsk_r2", status=RUNNING, created_at=2).model_copy(
        update={"agent": "plan", "model": "p/big"}
    ))  # fmt: skip
    await insert_all(
        store,
        [
            queued("tsk_build", "ses_a", created_at=10, agent="build"),
            queued("tsk_big", "ses_a", created_at=11, agent="plan", model="p/big"),
            queued("tsk_plain", "ses_a", created_at=12, agent="plan"),
            queued("tsk_b", "ses_b", created_at=13, agent="build"),
        ],
    )
    caps = Caps(max_running=10, per_agent={"build": 1}, per_model={"p/big": 1, "default": 5})
    admitted = await store.admit("b1", caps, "m")
    assert [t.id for t in admitted] == ["tsk_plain"]
    # the default model's cap counts the tasks without a model (two run): b's turn first (a
    # was served last), then a's head is held by that cap and its model task goes
    caps = Caps(max_running=10, per_model={"default": 3})
    assert [t.id for t in await store.admit("b1", caps, "m")] == ["tsk_b", "tsk_big"]


async def test_max_running_per_parent(store: TaskStore) -> None:
    await insert_all(store, [queued(f"tsk_a{i}", "ses_a", created_at=i) for i in range(3)])
    await store.insert(queued("tsk_b0", "ses_b", created_at=10))
    admitted = await store.admit("b1", Caps(max_running=10, per_parent=2), "m")
    assert sorted(t.id for t in admitted) == ["tsk_a0", "tsk_a1", "tsk_b0"]


async def test_a_fork_being_prepared_waits_and_a_queued_follow_up_resumes(
    store: TaskStore,
) -> None:
    await store.insert(queued("tsk_fork", created_at=1, fork_pending=True))
    await store.insert(queued("tsk_follow", created_at=2, resume_count=1, turn=2))
    admitted = await store.admit("b1", Caps(max_running=5), "m")
    assert [(t.id, t.status) for t in admitted] == [("tsk_follow", RESUMED)]

    def prepared(task: Task) -> tuple[Task, None]:
        task.fork_pending = False
        return task, None

    assert await store.update("tsk_fork", prepared) is not None
    assert [t.id for t in await store.admit("b1", Caps(max_running=5), "m")] == ["tsk_fork"]


async def test_a_task_whose_session_is_not_created_yet_waits_without_blocking(
    store: TaskStore,
) -> None:
    """A new task is stored before its child session exists: it is not admitted until the
    session is recorded, and the tasks behind it in its parent still start."""
    await store.insert(queued("tsk_new", created_at=1, session_id=None))
    await store.insert(queued("tsk_next", created_at=2))
    admitted = await store.admit("b1", Caps(max_running=5), "m")
    assert [t.id for t in admitted] == ["tsk_next"]

    def created(task: Task) -> tuple[Task, None]:
        task.session_id = "ses_created"
        return task, None

    assert await store.update("tsk_new", created) is not None
    assert [t.id for t in await store.admit("b1", Caps(max_running=5), "m")] == ["tsk_new"]


async def test_a_try_again_is_not_admitted_before_its_backoff_ends_nor_blocks_the_others(
    store: TaskStore,
) -> None:
    now = now_ms()
    # a prompt that spells the field must not be taken for it (the record holds it escaped)
    tricky = 'say "retry_at":1 and "retry_at":null'
    await store.insert(
        queued(
            "tsk_retry",
            created_at=1,
            tries=[None, None],
            retry_at=now + 1_500,
            turn=2,
            prompt=tricky,
            last_prompt=tricky,
        )
    )
    await store.insert(queued("tsk_next", created_at=2, prompt=tricky))
    ended = make_task("tsk_ran", status=COMPLETED, created_at=3)
    await store.insert(ended.model_copy(update={"retry_at": now + 9_000}))
    view = await store.queue_view("b1")
    assert {(e.id, e.not_before) for e in view.entries} == {
        ("tsk_retry", now + 1_500),
        ("tsk_next", None),
    }
    assert [t.id for t in await store.admit("b1", Caps(max_running=5), "m")] == ["tsk_next"]
    assert await store.admit("b1", Caps(max_running=5), "m") == []
    await asyncio.sleep(max(0.0, (now + 1_500 - now_ms()) / 1000) + 0.05)
    (retry,) = await store.admit("b1", Caps(max_running=5), "m")
    assert (retry.id, retry.status, retry.tries) == ("tsk_retry", RUNNING, [None, None])
    # running, it no longer has a backoff to wait out (it counts under the caps)
    running = {e.id: e for e in (await store.queue_view("b1")).entries}
    assert running["tsk_retry"].running and running["tsk_retry"].not_before is None


async def test_a_task_just_queued_by_another_manager_is_left_to_it_for_a_moment(
    store: TaskStore,
) -> None:
    now = now_ms()
    await store.renew_lease("mgr_a", "b1", 60)
    await store.insert(queued("tsk_fresh", created_at=now).model_copy(update={"owner": "mgr_a"}))
    await store.insert(
        queued("tsk_old", "ses_b", created_at=now - FRESH_MS - 1_000).model_copy(
            update={"owner": "mgr_a"}
        )
    )
    await store.insert(queued("tsk_mine", "ses_c", created_at=now).model_copy(
        update={"owner": "mgr_b"}
    ))  # fmt: skip
    # mgr_b starts its own new task and mgr_a's older one, not mgr_a's new one
    got = await store.admit("b1", Caps(max_running=5), "mgr_b")
    assert sorted(t.id for t in got) == ["tsk_mine", "tsk_old"]
    assert [t.id for t in await store.admit("b1", Caps(max_running=5), "mgr_a")] == ["tsk_fresh"]


async def test_a_queued_task_of_a_dead_manager_is_taken_over_before_it_is_admitted(
    store: TaskStore,
) -> None:
    old = now_ms() - FRESH_MS - 1_000
    await store.insert(queued("tsk_orphan", created_at=old).model_copy(update={"owner": "dead"}))
    await store.renew_lease("mgr_b", "b1", 60)
    assert await store.admit("b1", Caps(max_running=5), "mgr_b") == []
    assert [t.id for t in await store.take_over("mgr_b", "b1")] == ["tsk_orphan"]
    assert [t.id for t in await store.admit("b1", Caps(max_running=5), "mgr_b")] == ["tsk_orphan"]


async def test_queue_view_lists_queued_and_running_with_last_admissions(
    store: TaskStore,
) -> None:
    await store.insert(queued("tsk_q", "ses_a", created_at=1, agent="build", model="p/m"))
    await store.insert(queued("tsk_f", "ses_b", created_at=2, fork_pending=True))
    await store.insert(make_task("tsk_done", status=COMPLETED, created_at=3))
    [_admitted] = await store.admit("b1", Caps(max_running=5), "m")
    view = await store.queue_view("b1")
    assert {(e.id, e.parent, e.agent, e.model, e.running, e.ready) for e in view.entries} == {
        ("tsk_q", "ses_a", "build", "p/m", True, True),
        ("tsk_f", "ses_b", "general", None, False, False),
    }
    assert list(view.last_admitted) == ["ses_a"]
    assert (await store.queue_view("b2")).entries == []


async def test_concurrent_admits_on_many_handles_never_exceed_a_cap_or_admit_twice(
    open_store: OpenStore,
) -> None:
    stores = [await open_store() for _ in range(3)]
    parents = [f"ses_{k}" for k in range(4)]
    await insert_all(
        stores[0],
        [queued(f"tsk_{i:03d}", parents[i % 4], created_at=i) for i in range(60)],
    )
    caps = Caps(max_running=5, per_parent=2)
    admitted: Counter[str] = Counter()

    async def worker(store: TaskStore, name: str) -> None:
        for _ in range(40):
            got = await store.admit("b1", caps, name)
            admitted.update(t.id for t in got)
            running = [t for t in await store.list_tasks(statuses=(RUNNING,), backend="b1")]
            assert len(running) <= 5
            assert max(Counter(t.parent_session_id for t in running).values(), default=0) <= 2
            for task in got:  # the turn ends a little later
                await asyncio.sleep(0)
                await end(store, task.id)

    await asyncio.gather(*(worker(s, f"mgr_{k}_{j}") for k, s in enumerate(stores) for j in "ab"))
    assert set(admitted.values()) == {1}
    assert len(admitted) == 60


async def test_delete_queued_removes_only_a_task_still_queued(store: TaskStore) -> None:
    await insert_all(store, [queued(f"tsk_q{i}", created_at=i) for i in range(2)])
    await store.admit("b1", Caps(max_running=1), "m")
    assert await store.delete_queued("tsk_q0") is None  # admitted meanwhile: it stays
    assert (await store.get("tsk_q0")) is not None
    gone = await store.delete_queued("tsk_q1")
    assert gone is not None and gone.id == "tsk_q1"
    assert await store.get("tsk_q1") is None
    assert await store.delete_queued("tsk_q1") is None
    assert [e.id for e in (await store.queue_view("b1")).entries] == ["tsk_q0"]


async def test_take_over_hands_on_queued_tasks_of_a_dead_owner(store: TaskStore) -> None:
    await store.insert(queued("tsk_q", created_at=1, fork_pending=True))
    await store.renew_lease("mgr_new", "b1", 60)
    taken = await store.take_over("mgr_new", "b1")
    assert [(t.id, t.status, t.owner) for t in taken] == [("tsk_q", QUEUED, "mgr_new")]


async def test_descendants_walk_the_tree_of_tasks(store: TaskStore) -> None:
    def node(task_id: str, parent: str, session: str, created_at: int) -> Task:
        return make_task(task_id, parent=parent, session_id=session, created_at=created_at)

    await insert_all(
        store,
        [
            node("tsk_1", "ses_root", "ses_c1", 1),
            node("tsk_2", "ses_root", "ses_c2", 2),
            node("tsk_11", "ses_c1", "ses_c11", 3),
            node("tsk_111", "ses_c11", "ses_c111", 4),
            node("tsk_other", "ses_elsewhere", "ses_x", 5),
        ],
    )
    assert [t.id for t in await store.descendants("ses_root")] == [
        "tsk_1",
        "tsk_2",
        "tsk_11",
        "tsk_111",
    ]
    assert [t.id for t in await store.descendants("ses_c1")] == ["tsk_11", "tsk_111"]
    assert await store.descendants("ses_c111") == []


async def test_admissions_and_deletes_keep_the_stats_equal_to_a_recount(store: TaskStore) -> None:
    """The stores keep running totals with every write (admit, delete_queued, delete_parent
    included): the stats always equal the same stats counted over every stored task."""
    from asyncagents.tasks.models import TaskUsage
    from asyncagents.tasks.queries import stats_of

    async def recount() -> None:
        assert await store.task_stats("b1") == stats_of(await store.list_tasks(backend="b1"))

    used = TaskUsage(input_tokens=5, output_tokens=1, cost=0.125)
    tasks = [
        queued(
            f"tsk_q{i}",
            parent=f"ses_{i % 2}",
            created_at=10 + i,
            agent=("build", "explore")[i % 2],
            model="m/one",
            usage=used,
            usage_by_model={"m/one": used},
        )
        for i in range(6)
    ]
    await insert_all(store, tasks)
    await recount()
    admitted = await store.admit("b1", Caps(max_running=4), "mgr_a")
    assert len(admitted) == 4
    stats = await store.task_stats("b1")
    assert (stats.by_status["queued"], stats.by_status["running"]) == (2, 4)
    await recount()
    await end(store, admitted[0].id)
    assert await store.delete_queued("tsk_q5") is not None
    await recount()
    await store.delete_parent("ses_0", backend="b1")
    await recount()
    after = await store.task_stats("b1")
    assert after.tasks == 2 and after.usage.by_parent == {"ses_1": used + used}


async def test_queued_ahead_counts_the_parents_queued_tasks_created_before(
    store: TaskStore,
) -> None:
    """A task's place in its parent's queue: the parent's queued tasks of its backend created
    before it (by time, then id), whether admitted, ended, of another parent or backend."""
    await insert_all(
        store,
        [
            queued("tsk_a1", created_at=10),
            queued("tsk_a2", created_at=20),
            queued("tsk_a3b", created_at=30),
            queued("tsk_a3a", created_at=30),  # same time: the smaller id goes first
            queued("tsk_a4", created_at=40),
            queued("tsk_other_parent", "ses_b", created_at=5),
            queued("tsk_other_backend", created_at=5, backend="b2"),
            make_task("tsk_running", parent="ses_a", status=RUNNING, created_at=1),
            make_task("tsk_done", parent="ses_a", status=COMPLETED, created_at=2),
        ],
    )
    places = {
        t: await store.queued_ahead(await _get(store, t))
        for t in ("tsk_a1", "tsk_a2", "tsk_a3a", "tsk_a3b", "tsk_a4", "tsk_other_parent")
    }
    assert places == {
        "tsk_a1": 0,
        "tsk_a2": 1,
        "tsk_a3a": 2,
        "tsk_a3b": 3,
        "tsk_a4": 4,
        "tsk_other_parent": 0,
    }
    assert await store.queued_ahead(await _get(store, "tsk_other_backend")) == 0
    # one admitted and one deleted: they no longer wait ahead
    [first] = await store.admit("b1", Caps(max_running=2), "m")  # one runs already
    assert first.id == "tsk_other_parent"  # served first: never served, oldest head
    [second] = await store.admit("b1", Caps(max_running=3), "m")
    assert second.id == "tsk_a1"
    assert await store.delete_queued("tsk_a3a") is not None
    assert await store.queued_ahead(await _get(store, "tsk_a4")) == 2
    # a task not stored (or stored no more) has its place all the same
    ghost = queued("tsk_ghost", created_at=35)
    assert await store.queued_ahead(ghost) == 2
    # a key holding NUL matches nothing
    assert (
        await store.queued_ahead(ghost.model_copy(update={"parent_session_id": "ses_a\x00"})) == 0
    )


async def test_queued_ahead_sees_every_handles_tasks(open_store: OpenStore) -> None:
    """Tasks stored at once by many handles (many managers): each one's place counts every
    task created before it, whoever stored it; exactly the places past a bound are the ones
    created after the first `bound` tasks."""
    stores = [await open_store() for _ in range(3)]
    tasks = [queued(f"tsk_{i:03d}", created_at=100 + i) for i in range(24)]
    await asyncio.gather(*(insert_all(stores[k], tasks[k::3]) for k in range(3)))
    places = await asyncio.gather(
        *(stores[i % 3].queued_ahead(task) for i, task in enumerate(tasks))
    )
    assert places == list(range(24))


async def _get(store: TaskStore, task_id: str) -> Task:
    task = await store.get(task_id)
    assert task is not None
    return task
