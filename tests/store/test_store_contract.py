"""The `TaskStore` contract, run on every store: memory, SQLite and a real PostgreSQL.

Concurrency tests use several handles on one store (for SQLite: several connections to one file;
for PostgreSQL: several pools on one database) and several coroutines per handle.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from asyncagents.tasks import StoreError
from asyncagents.tasks.admission import Caps
from asyncagents.tasks.models import (
    FollowUp,
    Notice,
    Task,
    TaskLimits,
    TaskProgress,
    TaskStatus,
    TaskUsage,
    now_ms,
)
from asyncagents.tasks.queries import (
    DurationSummary,
    TaskChanges,
    TaskQuery,
    TaskStats,
    UsageSums,
)
from asyncagents.tasks.store import TaskStore
from store_records import COMPLETED, RESUMED, RUNNING, make_notice, make_task

if TYPE_CHECKING:
    from conftest import OpenStore


def complete_with(notice: Notice):  # type: ignore[no-untyped-def]
    def mutate(task: Task) -> tuple[Task, Notice | None]:
        task.status = COMPLETED
        task.result = "the answer"
        return task, notice

    return mutate


async def add_notice(store: TaskStore, task: Task, **kw: int) -> Notice:
    """Store `task` (if new) and a notice for it, the way the manager does: with an update."""
    if await store.get(task.id) is None:
        await store.insert(task)
    notice = make_notice(task, **kw)
    assert await store.update(task.id, lambda t: (t, notice)) is not None
    return notice


# --- tasks ---------------------------------------------------------------------------------------


async def test_open_is_idempotent_and_insert_get_round_trip(store: TaskStore) -> None:
    await store.open()
    task = make_task(owner="mgr_1", session_id="ses_child")
    task.fork_stats = {"kept": 3, "nested": {"x": [1, 2]}}
    await store.insert(task)
    got = await store.get(task.id)
    assert got == task
    assert got is not task
    got.prompt = "changed by the caller"
    assert (await store.get(task.id)) == task
    assert await store.get("tsk_missing") is None


def _nested(task: Task) -> Task:
    """`task` with a value in every field that can change in place (models, dicts, lists)."""
    task.progress.tools = {"read": 2}
    task.progress.retry = {"attempt": 1, "message": "busy", "detail": {"codes": [429]}}
    task.fork_stats = {"kept": 3, "nested": {"x": [1, 2]}}
    task.pending_followups = [FollowUp(prompt="next")]
    task.tries = ["p/m", None]
    task.usage = TaskUsage(input_tokens=5, cost=0.5)
    task.turn_usage = TaskUsage(output_tokens=2)
    task.usage_by_model = {"p/m": TaskUsage(cost=0.5)}
    task.limits = TaskLimits(max_cost=2.0)
    return task


def _scribble(task: Task) -> None:
    """Change every part of `task` that can change in place."""
    task.prompt = "changed by the caller"
    task.progress.tools["read"] = 99
    task.progress.tools["write"] = 1
    assert task.progress.retry is not None
    task.progress.retry["detail"]["codes"].append(500)
    assert task.fork_stats is not None
    task.fork_stats["nested"]["x"].append(3)
    task.pending_followups[0].prompt = "changed"
    task.pending_followups.append(FollowUp(prompt="more"))
    task.tries.append("other/model")
    task.usage.cost = 99.0
    task.turn_usage.output_tokens = 99
    task.usage_by_model["p/m"].cost = 99.0
    task.usage_by_model["x/y"] = TaskUsage()
    task.limits.max_cost = 99.0


async def test_no_change_of_a_callers_task_reaches_the_stored_one(store: TaskStore) -> None:
    """Whatever a caller changes in a task it gave or got, nested parts included, the stored
    task stays as stored: after insert, get, list_tasks, find_by_session, query_tasks,
    changed_since, update (its mutation's task too, declined or not), take_over, admit."""
    task = _nested(make_task(session_id="ses_child", owner="mgr_gone"))
    kept = task.model_copy(deep=True)
    await store.insert(task)
    _scribble(task)
    assert await store.get(kept.id) == kept
    got = [
        await store.get(kept.id),
        *await store.list_tasks(),
        *await store.list_tasks(kept.parent_session_id),
        await store.find_by_session("ses_child"),
        *(await store.query_tasks(TaskQuery(backend="b1"))).tasks,
        *(await store.changed_since("b1", 0)).tasks,
        *await store.descendants(kept.parent_session_id),
    ]
    for one in got:
        assert one == kept
        assert one is not None
        _scribble(one)
    assert await store.get(kept.id) == kept

    def scribble_and_decline(t: Task) -> None:
        _scribble(t)
        return None

    assert await store.update(kept.id, scribble_and_decline) is None
    assert await store.get(kept.id) == kept

    seen: list[Task] = []

    def keep(t: Task) -> tuple[Task, None]:
        seen.append(t)
        t.description = "updated"
        return t, None

    out = await store.update(kept.id, keep)
    assert out is not None
    kept.description = "updated"
    assert out[0] == kept
    stored = await store.get(kept.id)
    assert stored is not None
    kept.updated_at = stored.updated_at
    assert stored == kept
    _scribble(out[0])
    _scribble(seen[0])
    assert await store.get(kept.id) == kept

    taken = await store.take_over("mgr_new", "b1")
    assert [t.id for t in taken] == [kept.id]
    _scribble(taken[0])
    kept.owner = "mgr_new"
    assert await store.get(kept.id) == kept

    queued = _nested(make_task(status=TaskStatus.QUEUED, session_id="ses_q"))
    await store.insert(queued)
    [admitted] = await store.admit("b1", Caps(), "mgr_new")
    expected = admitted.model_copy(deep=True)
    _scribble(admitted)
    assert await store.get(queued.id) == expected


async def test_tree_costs_reads_id_session_and_cost_of_the_parents_tasks(
    store: TaskStore,
) -> None:
    """Every task of the parents given, of any backend (not their children's tasks), with
    its child session and ``usage.cost``, as stored now."""
    top = make_task("tsk_top", parent="ses_root", session_id="ses_child")
    top.usage = TaskUsage(cost=0.25)
    other_backend = make_task("tsk_b2", parent="ses_root", backend="b2")
    other_backend.usage = TaskUsage(cost=1.5)
    below = make_task("tsk_below", parent="ses_child")
    below.usage = TaskUsage(cost=0.125)
    elsewhere = make_task("tsk_elsewhere", parent="ses_other")
    for task in (top, other_backend, below, elsewhere):
        await store.insert(task)
    got = await store.tree_costs(["ses_root"])
    assert sorted((c.id, c.session_id, c.cost) for c in got) == [
        ("tsk_b2", None, 1.5),
        ("tsk_top", "ses_child", 0.25),
    ]
    both = await store.tree_costs(["ses_child", "ses_root", "ses_child"])
    assert sorted(c.id for c in both) == ["tsk_b2", "tsk_below", "tsk_top"]

    def spend(t: Task) -> tuple[Task, None]:
        t.usage = TaskUsage(cost=2.0)
        return t, None

    await store.update("tsk_top", spend)
    assert {c.id: c.cost for c in await store.tree_costs(["ses_root"])}["tsk_top"] == 2.0
    assert await store.tree_costs([]) == []
    assert await store.tree_costs(["ses_root\x00", "ses_missing"]) == []


async def test_insert_of_an_existing_id_raises_store_error_and_keeps_the_row(
    store: TaskStore,
) -> None:
    task = make_task()
    await store.insert(task)
    with pytest.raises(StoreError) as err:
        await store.insert(task.model_copy(update={"prompt": "other"}))
    assert task.id in str(err.value)
    assert (await store.get(task.id)) == task


async def test_update_saves_the_task_and_its_notice_together(store: TaskStore) -> None:
    task = make_task()
    await store.insert(task)
    notice = make_notice(task)
    out = await store.update(task.id, complete_with(notice))
    assert out is not None
    new, saved = out
    assert new.status is COMPLETED and saved == notice
    assert (await store.get(task.id)) == new
    assert await store.notices() == [notice]


async def test_update_of_a_missing_task_or_a_declined_mutation_changes_nothing(
    store: TaskStore,
) -> None:
    calls: list[str] = []

    def decline(task: Task) -> None:
        calls.append(task.id)
        return None

    assert await store.update("tsk_missing", decline) is None
    assert calls == []
    task = make_task()
    await store.insert(task)
    assert await store.update(task.id, decline) is None
    assert calls == [task.id]
    assert (await store.get(task.id)) == task
    assert await store.notices() == []


async def test_a_failing_mutation_rolls_back_and_its_error_passes_through(
    store: TaskStore,
) -> None:
    task = make_task()
    await store.insert(task)

    def fail(t: Task) -> tuple[Task, Notice | None]:
        raise ValueError("mutation refused")

    with pytest.raises(ValueError, match="mutation refused"):
        await store.update(task.id, fail)
    assert (await store.get(task.id)) == task
    # the store stays usable after the rollback
    assert await store.update(task.id, complete_with(make_notice(task))) is not None


async def test_concurrent_updates_never_lose_a_change(open_store: OpenStore) -> None:
    handles = [await open_store() for _ in range(3)]
    task = make_task()
    await handles[0].insert(task)

    def bump(t: Task) -> tuple[Task, Notice | None]:
        t.resume_count += 1
        return t, None

    await asyncio.gather(*(handles[i % 3].update(task.id, bump) for i in range(60)))
    got = await handles[1].get(task.id)
    assert got is not None and got.resume_count == 60


async def test_list_tasks_newest_first_with_every_filter(store: TaskStore) -> None:
    a = make_task("tsk_a", parent="p1", backend="b1", owner="m1", created_at=10)
    b = make_task("tsk_b", parent="p1", backend="b2", owner="m2", created_at=30, status=COMPLETED)
    c = make_task("tsk_c", parent="p2", backend="b1", owner=None, created_at=20, status=RESUMED)
    d = make_task("tsk_d", parent="p1", backend="b1", owner="m1", created_at=30)  # ties with b
    for t in (a, b, c, d):
        await store.insert(t)

    async def ids(*args: object, **kw: object) -> list[str]:
        return [t.id for t in await store.list_tasks(*args, **kw)]  # type: ignore[arg-type]

    assert await ids() == ["tsk_d", "tsk_b", "tsk_c", "tsk_a"]
    assert await ids("p1") == ["tsk_d", "tsk_b", "tsk_a"]
    assert await ids("p2") == ["tsk_c"]
    assert await ids("nobody") == []
    assert await ids(None, [RUNNING, RESUMED]) == ["tsk_d", "tsk_c", "tsk_a"]
    assert await ids(None, {COMPLETED}) == ["tsk_b"]
    assert await ids(None, []) == []
    assert await ids(backend="b1") == ["tsk_d", "tsk_c", "tsk_a"]
    assert await ids(backend="b3") == []
    assert await ids(owner="m1") == ["tsk_d", "tsk_a"]
    assert await ids("p1", [RUNNING], backend="b1", owner="m1") == ["tsk_d", "tsk_a"]
    assert await ids("p1", [COMPLETED], backend="b1") == []
    assert (await store.list_tasks("p2")) == [c]


async def test_find_by_session_returns_the_newest_task_of_that_session(store: TaskStore) -> None:
    old = make_task(session_id="ses_x", created_at=1)
    new = make_task(session_id="ses_x", created_at=2)
    other = make_task(session_id="ses_y", created_at=3)
    for t in (old, new, other):
        await store.insert(t)
    assert await store.find_by_session("ses_x") == new
    assert await store.find_by_session("ses_y") == other
    assert await store.find_by_session("ses_none") is None


async def test_ids_with_prefix_is_exact_sorted_limited_and_parent_scoped(store: TaskStore) -> None:
    for task_id, parent in (
        ("tsk_abc1", "p1"),
        ("tsk_abc2", "p1"),
        ("tsk_abd3", "p2"),
        ("tsk_ABC4", "p1"),
        ("tsk_a%c5", "p1"),
        ("tsk_a_c6", "p1"),
    ):
        await store.insert(make_task(task_id, parent=parent))
    assert await store.ids_with_prefix("tsk_ab") == ["tsk_abc1", "tsk_abc2"]
    assert await store.ids_with_prefix("tsk_ab", limit=5) == ["tsk_abc1", "tsk_abc2", "tsk_abd3"]
    assert await store.ids_with_prefix("tsk_ab", "p2", limit=5) == ["tsk_abd3"]
    assert await store.ids_with_prefix("tsk_abc2") == ["tsk_abc2"]
    assert await store.ids_with_prefix("tsk_AB") == ["tsk_ABC4"]  # case matters
    assert await store.ids_with_prefix("tsk_a%") == ["tsk_a%c5"]  # no wildcards
    assert await store.ids_with_prefix("tsk_a_") == ["tsk_a_c6"]
    assert await store.ids_with_prefix("tsk_zz") == []
    assert await store.ids_with_prefix("tsk_", limit=1) == ["tsk_ABC4"]


async def test_delete_parent_removes_tasks_and_notices_of_that_backend_only(
    store: TaskStore,
) -> None:
    mine_old = make_task(parent="p1", backend="b1", created_at=1)
    mine_new = make_task(parent="p1", backend="b1", created_at=2)
    theirs = make_task(parent="p1", backend="b2", created_at=3)
    other_parent = make_task(parent="p2", backend="b1", created_at=4)
    n_mine = await add_notice(store, mine_new)
    n_theirs = await add_notice(store, theirs)
    n_other = await add_notice(store, other_parent)
    await store.insert(mine_old)

    removed = await store.delete_parent("p1", backend="b1")
    assert removed == [mine_new, mine_old]
    assert {t.id for t in await store.list_tasks()} == {theirs.id, other_parent.id}
    assert [n.id for n in await store.notices()] == [n_theirs.id, n_other.id]
    assert n_mine.id not in {n.id for n in await store.notices()}

    assert [t.id for t in await store.delete_parent("p1")] == [theirs.id]
    assert [n.id for n in await store.notices()] == [n_other.id]
    assert await store.delete_parent("p1") == []


# --- ownership -----------------------------------------------------------------------------------


async def test_take_over_hands_only_orphaned_active_tasks_of_the_backend(store: TaskStore) -> None:
    await store.renew_lease("live", "b1", ttl=600)
    await store.renew_lease("expired", "b1", ttl=0)
    await store.renew_lease("taker", "b1", ttl=600)
    live = make_task(owner="live", created_at=1)
    expired = make_task(owner="expired", created_at=2)
    missing = make_task(owner="no_lease", created_at=3)
    unowned = make_task(owner=None, created_at=4, status=RESUMED)
    ended = make_task(owner="expired", created_at=5, status=COMPLETED)
    elsewhere = make_task(owner="expired", created_at=6, backend="b2")
    own = make_task(owner="taker", created_at=7)
    for t in (live, expired, missing, unowned, ended, elsewhere, own):
        await store.insert(t)

    taken = await store.take_over("taker", "b1")
    assert [t.id for t in taken] == [expired.id, missing.id, unowned.id]
    assert all(t.owner == "taker" for t in taken)
    assert taken[0] == expired.model_copy(update={"owner": "taker"})
    mine = {t.id for t in await store.list_tasks(owner="taker")}
    assert mine == {expired.id, missing.id, unowned.id, own.id}
    assert (await store.get(live.id)) == live
    assert (await store.get(ended.id)) == ended
    assert (await store.get(elsewhere.id)) == elsewhere
    assert await store.take_over("taker", "b1") == []
    assert await store.take_over("another", "b1") == []  # the taker's lease is live


async def test_lease_renewal_expiry_and_drop(store: TaskStore) -> None:
    task = make_task(owner="m1")
    await store.insert(task)
    await store.renew_lease("m1", "b1", ttl=0)  # expired at once
    await store.renew_lease("m1", "b1", ttl=600)  # renewed before anyone looked
    assert await store.take_over("m2", "b1") == []
    await store.renew_lease("m1", "b1", ttl=0)
    assert [t.id for t in await store.take_over("m2", "b1")] == [task.id]
    await store.renew_lease("m2", "b1", ttl=600)
    assert await store.take_over("m3", "b1") == []
    await store.drop_lease("m2")  # graceful close: taken at once
    assert [t.owner for t in await store.take_over("m3", "b1")] == ["m3"]
    await store.drop_lease("never_had_one")


async def test_take_over_respects_limit_oldest_first(store: TaskStore) -> None:
    tasks = [make_task(owner="dead", created_at=100 - i) for i in range(5)]
    for t in tasks:
        await store.insert(t)
    await store.renew_lease("m1", "b1", ttl=600)
    first = await store.take_over("m1", "b1", limit=2)
    assert [t.id for t in first] == [tasks[4].id, tasks[3].id]
    rest = await store.take_over("m2", "b1", limit=10)
    assert [t.id for t in rest] == [tasks[2].id, tasks[1].id, tasks[0].id]


async def test_concurrent_take_over_never_gives_one_task_to_two_owners(
    open_store: OpenStore,
) -> None:
    handles = [await open_store() for _ in range(4)]
    tasks = [make_task(owner=f"dead_{i % 3}") for i in range(150)]
    for t in tasks:
        await handles[0].insert(t)

    async def worker(n: int) -> list[str]:
        store, owner = handles[n % len(handles)], f"mgr_{n}"
        await store.renew_lease(owner, "b1", ttl=600)
        got: list[str] = []
        while batch := await store.take_over(owner, "b1", limit=7):
            got.extend(t.id for t in batch)
            await asyncio.sleep(0)
        return got

    results = await asyncio.gather(*(worker(n) for n in range(8)))
    counts = Counter(task_id for got in results for task_id in got)
    assert set(counts) == {t.id for t in tasks}
    assert max(counts.values()) == 1
    for n, got in enumerate(results):
        owned = await handles[0].list_tasks(owner=f"mgr_{n}")
        assert sorted(t.id for t in owned) == sorted(got)


# --- notices -------------------------------------------------------------------------------------


async def test_notices_lists_pending_oldest_first_with_filters(store: TaskStore) -> None:
    t1 = make_task(parent="p1", backend="b1")
    t2 = make_task(parent="p2", backend="b2")
    late = await add_notice(store, t1, created_at=30)
    early = await add_notice(store, t2, created_at=10)
    mid = await add_notice(store, t1, created_at=20)
    assert [n.id for n in await store.notices()] == [early.id, mid.id, late.id]
    assert [n.id for n in await store.notices("p1")] == [mid.id, late.id]
    assert [n.id for n in await store.notices(backend="b2")] == [early.id]
    assert await store.notices("p1", backend="b2") == []
    assert (await store.notices("p2")) == [early]


async def test_claim_notices_takes_due_unclaimed_notices_of_the_backend(store: TaskStore) -> None:
    t1 = make_task(parent="p1")
    t2 = make_task(parent="p2")
    t3 = make_task(parent="p1", backend="b2")
    due1 = await add_notice(store, t1, created_at=1)
    later = await add_notice(store, t1, created_at=2, next_attempt_at=now_ms() + 600_000)
    due2 = await add_notice(store, t2, created_at=3)
    other_backend = await add_notice(store, t3, created_at=4)

    before = now_ms()
    claimed = await store.claim_notices("m1", "b1", claim_ttl=60, limit=10)
    assert [n.id for n in claimed] == [due1.id, due2.id]
    for n in claimed:
        assert n.claimed_by == "m1"
        assert n.claim_expires_at is not None
        assert before + 50_000 <= n.claim_expires_at <= now_ms() + 70_000
    assert claimed[0] == due1.model_copy(
        update={"claimed_by": "m1", "claim_expires_at": claimed[0].claim_expires_at}
    )
    # a live claim is not handed out again; not-yet-due and other backends' notices never are
    assert await store.claim_notices("m2", "b1", claim_ttl=60) == []
    pending = {n.id: n for n in await store.notices()}
    assert pending[due1.id].claimed_by == "m1"
    assert pending[later.id].claimed_by is None
    assert pending[other_backend.id].claimed_by is None
    assert [n.id for n in await store.claim_notices("m3", "b2", claim_ttl=60)] == [other_backend.id]


async def test_claim_notices_limit_parent_filter_and_expired_claims(store: TaskStore) -> None:
    t1, t2 = make_task(parent="p1"), make_task(parent="p2")
    a = await add_notice(store, t1, created_at=1)
    b = await add_notice(store, t2, created_at=2)
    c = await add_notice(store, t1, created_at=3)
    assert [n.id for n in await store.claim_notices("m1", "b1", 0, parent_session_id="p2")] == [
        b.id
    ]
    assert [n.id for n in await store.claim_notices("m1", "b1", 600, limit=1)] == [a.id]
    # b's claim (ttl 0) has expired: it is handed out again, a's is live and is not
    again = await store.claim_notices("m2", "b1", 600)
    assert [n.id for n in again] == [b.id, c.id]
    assert all(n.claimed_by == "m2" for n in again)


async def test_release_notice_saves_the_attempt_and_unclaims(store: TaskStore) -> None:
    task = make_task()
    notice = await add_notice(store, task)
    [claimed] = await store.claim_notices("m1", "b1", claim_ttl=600)
    failed = claimed.model_copy(
        update={"attempts": 1, "last_error": "parent busy", "next_attempt_at": now_ms() + 600_000}
    )
    await store.release_notice(failed)
    [stored] = await store.notices()
    assert stored == failed.model_copy(update={"claimed_by": None, "claim_expires_at": None})
    assert await store.claim_notices("m2", "b1", claim_ttl=600) == []  # not due yet
    due = stored.model_copy(update={"next_attempt_at": 0})
    await store.release_notice(due)  # unclaimed notice released by an unclaimed copy: saved
    [reclaimed] = await store.claim_notices("m2", "b1", claim_ttl=600)
    assert (reclaimed.id, reclaimed.attempts, reclaimed.claimed_by) == (notice.id, 1, "m2")


async def test_release_by_a_stale_claimer_changes_nothing(store: TaskStore) -> None:
    task = make_task()
    await add_notice(store, task)
    [stale] = await store.claim_notices("m1", "b1", claim_ttl=0)  # expires at once
    [current] = await store.claim_notices("m2", "b1", claim_ttl=600)
    await store.release_notice(stale.model_copy(update={"attempts": 5, "last_error": "late"}))
    [stored] = await store.notices()
    assert stored == current
    assert await store.claim_notices("m3", "b1", claim_ttl=600) == []


async def test_delete_notice_removes_it_and_ignores_missing_ids(store: TaskStore) -> None:
    task = make_task()
    a = await add_notice(store, task, created_at=1)
    b = await add_notice(store, task, created_at=2)
    await store.delete_notice(a.id)
    await store.delete_notice(a.id)
    await store.delete_notice("ntc_missing")
    assert await store.notices() == [b]
    assert [n.id for n in await store.claim_notices("m1", "b1", 60)] == [b.id]


async def test_concurrent_claimers_never_get_the_same_notice(open_store: OpenStore) -> None:
    handles = [await open_store() for _ in range(3)]
    task = make_task()
    await handles[0].insert(task)
    notices = [make_notice(task) for _ in range(240)]
    for n in notices:
        await handles[0].update(task.id, lambda t, n=n: (t, n))  # type: ignore[misc]

    async def courier(k: int) -> list[str]:
        store, got = handles[k % len(handles)], []
        while batch := await store.claim_notices(f"m{k}", "b1", claim_ttl=600, limit=9):
            for notice in batch:
                got.append(notice.id)
                await store.delete_notice(notice.id)
        return got

    results = await asyncio.gather(*(courier(k) for k in range(6)))
    counts = Counter(nid for got in results for nid in got)
    assert set(counts) == {n.id for n in notices}
    assert max(counts.values()) == 1
    assert await handles[1].notices() == []


# --- queries: pages, search, stats, changes ---------------------------------------------------


def _ended(task: Task, status: TaskStatus, took: int, **tools: int) -> Task:
    task.status = status
    task.completed_at = task.created_at + took
    task.updated_at = task.completed_at
    task.progress = TaskProgress(tool_calls=sum(tools.values()), tools=tools)
    return task


async def _query_ids(store: TaskStore, **kw: object) -> tuple[list[str], int | None]:
    page = await store.query_tasks(TaskQuery(backend="b1", **kw))  # type: ignore[arg-type]
    return [t.id for t in page.tasks], page.total


async def test_query_tasks_filters_sorts_and_counts_in_the_store(store: TaskStore) -> None:
    a = make_task("tsk_a", parent="p1", created_at=10)
    a.description, a.agent = "Deploy the site", "build"
    b = _ended(make_task("tsk_b", parent="p1", created_at=30), COMPLETED, 50)
    b.result = "All TESTS pass: 100% (50_50)"
    c = _ended(make_task("tsk_c", parent="p2", created_at=20), TaskStatus.ERROR, 5)
    c.error = "Größe exceeded"
    d = make_task("tsk_d", parent="p1", created_at=30)  # ties with b: the id decides
    d.prompt = "Look for TODO notes"
    a.updated_at, d.updated_at = 15, 35
    other = make_task("tsk_e", backend="b2", created_at=40)
    for t in (a, b, c, d, other):
        await store.insert(t)

    assert await _query_ids(store) == (["tsk_d", "tsk_b", "tsk_c", "tsk_a"], 4)
    assert await _query_ids(store, descending=False) == (["tsk_a", "tsk_c", "tsk_b", "tsk_d"], 4)
    assert await _query_ids(store, sort="updated_at") == (["tsk_b", "tsk_d", "tsk_c", "tsk_a"], 4)
    assert await _query_ids(store, parent_session_id="p1") == (["tsk_d", "tsk_b", "tsk_a"], 3)
    assert await _query_ids(store, statuses=frozenset({COMPLETED, TaskStatus.ERROR})) == (
        ["tsk_b", "tsk_c"],
        2,
    )
    assert await _query_ids(store, statuses=frozenset()) == ([], 0)
    assert await _query_ids(store, agent="build") == (["tsk_a"], 1)
    # the text: id, description, prompt, result, error; case-folded; LIKE's marks are plain
    assert await _query_ids(store, text="deploy") == (["tsk_a"], 1)
    assert await _query_ids(store, text="todo NOTES") == (["tsk_d"], 1)
    assert await _query_ids(store, text="tests pass") == (["tsk_b"], 1)
    assert await _query_ids(store, text="100%") == (["tsk_b"], 1)
    assert await _query_ids(store, text="0_5") == (["tsk_b"], 1)
    assert await _query_ids(store, text="%") == (["tsk_b"], 1)
    assert await _query_ids(store, text="GRÖSSE") == (["tsk_c"], 1)
    assert await _query_ids(store, text="tsk_c") == (["tsk_c"], 1)
    assert await _query_ids(store, text="nothing like it") == ([], 0)
    assert await _query_ids(store, text="TSK", parent_session_id="p1", limit=1) == (["tsk_d"], 3)
    uncounted = await store.query_tasks(TaskQuery(backend="b1", count=False))
    assert uncounted.total is None and len(uncounted.tasks) == 4
    assert (await store.query_tasks(TaskQuery(backend="b1", text="deploy"))).tasks == [a]


@pytest.mark.parametrize("sort", ["created_at", "updated_at"])
@pytest.mark.parametrize("descending", [True, False])
async def test_query_pages_cover_every_task_once_in_order(
    store: TaskStore, sort: str, descending: bool
) -> None:
    made = []
    for i in range(11):
        task = make_task(f"tsk_{i:02d}", created_at=100 + i // 3)  # ties of three
        task.updated_at = 500 - i // 2
        made.append(task)
        await store.insert(task)
    key = (lambda t: t.created_at) if sort == "created_at" else (lambda t: t.updated_at)
    expected = [t.id for t in sorted(made, key=lambda t: (key(t), t.id), reverse=descending)]
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = await store.query_tasks(
            TaskQuery(backend="b1", sort=sort, descending=descending, limit=4, after=after)  # type: ignore[arg-type]
        )
        pages += 1
        seen += [t.id for t in page.tasks]
        assert page.total == 11
        after = page.next_after
        if after is None:
            break
        assert after == (key(page.tasks[-1]), page.tasks[-1].id)
    assert seen == expected
    assert pages == 3
    exact = await store.query_tasks(TaskQuery(backend="b1", limit=11))
    assert exact.next_after is None and len(exact.tasks) == 11


def _u(tokens: int, cost: float) -> TaskUsage:
    return TaskUsage(input_tokens=tokens, output_tokens=2 * tokens, cost=cost)


def _used(task: Task, **by_model: TaskUsage) -> Task:
    """`task` with this usage by model (``m_a`` is the model ``m/a``) and its sum."""
    task.usage_by_model = {name.replace("_", "/"): u for name, u in by_model.items()}
    task.usage = sum(by_model.values(), TaskUsage())
    return task


async def test_task_stats_counts_in_the_store(store: TaskStore) -> None:
    empty = await store.task_stats("b1")
    assert empty == TaskStats(
        tasks=0,
        by_status={s.value: 0 for s in TaskStatus},
        by_agent={},
        tool_calls={},
        tools_unrecorded=0,
        durations=DurationSummary(),
        usage=UsageSums(),
    )
    tasks = [
        _used(_ended(make_task(parent="p1"), COMPLETED, 10, bash=2, read=1), m_a=_u(10, 0.25)),
        _used(
            _ended(make_task(parent="p1"), COMPLETED, 40, read=3),
            m_a=_u(5, 0.5),
            m_b=_u(1, 0.125),
        ),
        _used(_ended(make_task(parent="p2"), TaskStatus.ERROR, 20), m_b=_u(100, 1.0)),
        _ended(make_task(parent="p2"), TaskStatus.CANCELLED, 30, bash=1),
        make_task(parent="p1"),  # running: no duration
    ]
    tasks[1].agent = "explore"
    old = _ended(make_task(parent="p2"), COMPLETED, 70)
    old.progress = TaskProgress(tool_calls=4)  # an older version kept no names
    tasks.append(old)
    # a task of p1's child session, waiting: in p1's tree, under its own parent
    kid = make_task(parent="ses_kid", status=TaskStatus.QUEUED)
    kid.root_session_id, kid.depth = "p1", 2
    tasks.append(kid)
    tasks.append(_used(_ended(make_task(backend="b2"), COMPLETED, 999, edit=9), m_a=_u(1000, 8.0)))
    for t in tasks:
        await store.insert(t)
    stats = await store.task_stats("b1")
    assert stats == TaskStats(
        tasks=7,
        by_status={
            "queued": 1,
            "running": 1,
            "resumed": 0,
            "completed": 3,
            "error": 1,
            "cancelled": 1,
        },
        by_agent={"explore": 1, "general": 6},
        tool_calls={"read": 4, "bash": 3},
        tools_unrecorded=1,
        durations=DurationSummary(count=5, min_ms=10, median_ms=30, p95_ms=70, max_ms=70),
        usage=UsageSums(
            total=_u(116, 1.875),
            by_agent={"explore": _u(6, 0.625), "general": _u(110, 1.25)},
            by_model={"m/a": _u(15, 0.75), "m/b": _u(101, 1.125)},
            by_parent={"p2": _u(100, 1.0), "p1": _u(16, 0.875), "ses_kid": _u(0, 0.0)},
            by_tree={"p2": _u(100, 1.0), "p1": _u(16, 0.875)},
            parents=3,
            trees=2,
        ),
    )
    # highest cost first (dicts compare without order: the keys' order is asserted)
    assert list(stats.usage.by_parent) == ["p2", "p1", "ses_kid"]
    assert list(stats.usage.by_tree) == ["p2", "p1"]
    p1 = await store.task_stats("b1", "p1")
    assert p1.tasks == 3 and p1.tool_calls == {"read": 4, "bash": 2}
    assert p1.durations == DurationSummary(count=2, min_ms=10, median_ms=25.0, p95_ms=40, max_ms=40)
    assert p1.usage == UsageSums(
        total=_u(16, 0.875),
        by_agent={"explore": _u(6, 0.625), "general": _u(10, 0.25)},
        by_model={"m/a": _u(15, 0.75), "m/b": _u(1, 0.125)},
        by_parent={"p1": _u(16, 0.875)},
        by_tree={"p1": _u(16, 0.875)},
        parents=1,
        trees=1,
    )
    # a page's usage: every match's, on every page
    page = await store.query_tasks(TaskQuery(backend="b1", limit=1))
    assert page.total == 7 and page.usage == _u(116, 1.875)
    done = await store.query_tasks(TaskQuery(backend="b1", statuses=frozenset({COMPLETED})))
    assert done.total == 3 and done.usage == _u(16, 0.875)
    mine = await store.query_tasks(TaskQuery(backend="b1", parent_session_id="p2", text="task"))
    assert mine.total == 3 and mine.usage == _u(100, 1.0)
    # a later turn's tools replace the earlier ones; a cleared parent's are gone
    out = await store.update(
        tasks[0].id,
        lambda t: (t.model_copy(update={"progress": TaskProgress(tools={"grep": 1})}), None),
    )
    assert out is not None
    assert (await store.task_stats("b1", "p1")).tool_calls == {"read": 3, "grep": 1}
    await store.delete_parent("p1", backend="b1")
    after = await store.task_stats("b1")
    assert after.tasks == 4 and after.tool_calls == {"bash": 1}
    assert (await store.task_stats("b2")).tool_calls == {"edit": 9}
    assert after.usage == UsageSums(
        total=_u(100, 1.0),
        by_agent={"general": _u(100, 1.0)},
        by_model={"m/b": _u(100, 1.0)},
        by_parent={"p2": _u(100, 1.0), "ses_kid": _u(0, 0.0)},
        by_tree={"p2": _u(100, 1.0), "p1": _u(0, 0.0)},
        parents=2,
        trees=2,
    )
    assert list(after.usage.by_tree) == ["p2", "p1"]
    # usage that grows moves every sum; a queued task deleted leaves them
    out = await store.update(
        tasks[2].id, lambda t: (_used(t, m_b=_u(150, 1.5), m_c=_u(7, 0.0)), None)
    )
    assert out is not None
    assert await store.delete_queued(kid.id) is not None
    after = await store.task_stats("b1")
    assert after.usage == UsageSums(
        total=_u(157, 1.5),
        by_agent={"general": _u(157, 1.5)},
        by_model={"m/b": _u(150, 1.5), "m/c": _u(7, 0.0)},
        by_parent={"p2": _u(157, 1.5)},
        by_tree={"p2": _u(157, 1.5)},
        parents=1,
        trees=1,
    )
    assert after.by_status["queued"] == 0 and after.tasks == 3


async def test_task_stats_list_the_top_parents_and_trees(store: TaskStore) -> None:
    """`by_parent` and `by_tree` hold the top N by cost, then tokens, then id; `parents` and
    `trees` count them all; a parent's stats are cut the same way."""
    # (parent, tree, tokens, cost): p_b and p_c tie on cost (tokens decide), p_d and p_e tie
    # on both (the id decides)
    rows = [
        ("p_a", "t_1", 10, 0.5),
        ("p_b", "t_1", 30, 2.0),
        ("p_c", "t_2", 40, 2.0),
        ("p_d", "t_3", 5, 0.25),
        ("p_e", "t_3", 5, 0.25),
        ("p_f", "t_4", 1000, 0.0),
        ("p_g", "t_5", 0, 4.0),
    ]
    for parent, tree, tokens, cost in rows:
        task = _used(_ended(make_task(parent=parent), COMPLETED, 10), m_a=_u(tokens, cost))
        task.root_session_id = tree
        await store.insert(task)
    await store.insert(_used(make_task(parent="p_z", backend="b2"), m_a=_u(9, 99.0)))
    every = await store.task_stats("b1", top=1000)
    assert list(every.usage.by_parent.items()) == [
        ("p_g", _u(0, 4.0)),
        ("p_c", _u(40, 2.0)),
        ("p_b", _u(30, 2.0)),
        ("p_a", _u(10, 0.5)),
        ("p_d", _u(5, 0.25)),
        ("p_e", _u(5, 0.25)),
        ("p_f", _u(1000, 0.0)),
    ]
    assert list(every.usage.by_tree.items()) == [
        ("t_5", _u(0, 4.0)),
        ("t_1", _u(40, 2.5)),
        ("t_2", _u(40, 2.0)),
        ("t_3", _u(10, 0.5)),
        ("t_4", _u(1000, 0.0)),
    ]
    assert (every.usage.parents, every.usage.trees) == (7, 5)
    default = await store.task_stats("b1")
    assert default.usage == every.usage
    three = await store.task_stats("b1", top=3)
    assert list(three.usage.by_parent) == ["p_g", "p_c", "p_b"]
    assert list(three.usage.by_tree) == ["t_5", "t_1", "t_2"]
    assert (three.usage.parents, three.usage.trees) == (7, 5)
    assert three.usage.total == every.usage.total == _u(1090, 9.0)
    assert three.usage.by_model == {"m/a": _u(1090, 9.0)}
    none = await store.task_stats("b1", top=0)
    assert none.usage.by_parent == {} and none.usage.by_tree == {}
    assert (none.usage.parents, none.usage.trees) == (7, 5)
    one = await store.task_stats("b1", "p_d", top=0)
    assert one.usage.by_parent == {} and (one.usage.parents, one.usage.trees) == (1, 1)
    assert one.usage.total == _u(5, 0.25)
    other = await store.task_stats("b2", top=1)
    assert other.usage.by_parent == {"p_z": _u(9, 99.0)}
    assert (other.usage.parents, other.usage.trees) == (1, 1)
    # a parent cleared leaves the counts and the list
    await store.delete_parent("p_g", backend="b1")
    after = await store.task_stats("b1", top=2)
    assert list(after.usage.by_parent) == ["p_c", "p_b"]
    assert list(after.usage.by_tree) == ["t_1", "t_2"]
    assert (after.usage.parents, after.usage.trees) == (6, 4)


async def test_changed_since_reads_recent_writes_and_clears(store: TaskStore) -> None:
    old = make_task(parent="p1")
    old.updated_at = 1_000
    new = make_task(parent="p2")
    new.updated_at = now_ms()
    other = make_task(parent="p2", backend="b2")
    other.updated_at = now_ms()
    for t in (old, new, other):
        await store.insert(t)
    mark = now_ms() - 60_000
    changes = await store.changed_since("b1", mark)
    assert changes == TaskChanges(tasks=[new], cleared=[])
    assert [t.id for t in (await store.changed_since("b1", 0)).tasks] == [old.id, new.id]

    def touch(t: Task) -> tuple[Task, None]:
        t.updated_at = new.updated_at + 5
        return t, None

    assert await store.update(old.id, touch) is not None
    assert [t.id for t in (await store.changed_since("b1", mark)).tasks] == [new.id, old.id]
    before_clear = now_ms()
    await store.delete_parent("p2", backend="b1")
    changes = await store.changed_since("b1", before_clear)
    assert changes.cleared == [new.id]
    assert new.id not in [t.id for t in changes.tasks]
    assert (await store.changed_since("b2", before_clear)).cleared == []
    assert (await store.changed_since("b1", now_ms() + 60_000)).cleared == []


# --- keys holding NUL ----------------------------------------------------------------------------


async def test_a_key_holding_nul_matches_nothing_on_every_store(store: TaskStore) -> None:
    task = make_task(session_id="ses_child")
    await store.insert(task)
    await add_notice(store, task)
    for key in ("\x00", f"{task.id}\x00", f"tsk\x00{task.id}", "ses_parent\x00"):
        assert await store.get(key) is None
        assert await store.ids_with_prefix(key) == []
        assert await store.ids_with_prefix("tsk", key) == []
        assert await store.update(key, lambda t: (t, None)) is None
        assert await store.find_by_session(key) is None
        assert await store.list_tasks(key) == []
        assert await store.list_tasks(backend=key) == []
        assert await store.list_tasks(owner=key) == []
        assert await store.delete_parent(key) == []
        assert await store.notices(key) == []
        assert await store.claim_notices("mgr_1", key, 30) == []
        await store.delete_notice(key)
        await store.drop_lease(key)
    # nothing was changed or lost
    assert await store.get(task.id) == task
    assert [n.task_id for n in await store.notices()] == [task.id]


async def test_queries_with_nul_match_nothing_and_texts_with_nul_are_stored(
    store: TaskStore,
) -> None:
    odd = make_task("tsk_nul", parent="p1")
    odd.agent, odd.prompt = "bu\x00ild", "find the \x00 marker"
    await store.insert(odd)
    assert (await store.get(odd.id)) == odd  # the record itself is kept as it was
    assert await _query_ids(store, text="marker") == (["tsk_nul"], 1)
    for kw in ({"text": "\x00"}, {"agent": "bu\x00ild"}, {"parent_session_id": "p\x00"}):
        assert await _query_ids(store, **kw) == ([], 0)
    assert (await store.task_stats("b1")).by_agent == {"bu\ufffdild": 1}
    assert (await store.task_stats("b\x00")).tasks == 0
    assert (await store.changed_since("b\x00", 0)).tasks == []


async def test_running_totals_match_a_recount_after_concurrent_changes(
    open_store: OpenStore,
) -> None:
    """The stats without a parent come from totals kept with each write; after concurrent
    updates (each one moving a task between statuses and tools) and a clear, they equal a
    count over the tasks themselves."""
    from asyncagents.tasks.queries import stats_of

    one, two = await open_store(), await open_store()
    tasks = [make_task(f"tsk_t{i:02d}", parent=f"p{i % 3}") for i in range(12)]
    for t in tasks:
        await one.insert(t)
    ends = [COMPLETED, TaskStatus.ERROR, TaskStatus.CANCELLED]

    def end(i: int, round_: int):  # type: ignore[no-untyped-def]
        def mutate(t: Task) -> tuple[Task, None]:
            _ended(t, ends[(i + round_) % 3], 10 * i + round_, **{f"tool{round_ % 2}": i})
            t.agent = ("general", "explore")[(i + round_) % 2]
            return t, None

        return mutate

    for round_ in range(3):
        await asyncio.gather(
            *((one if i % 2 else two).update(t.id, end(i, round_)) for i, t in enumerate(tasks))
        )
    await two.delete_parent("p1", backend="b1")
    stats = await one.task_stats("b1")
    assert stats == stats_of(await one.list_tasks(backend="b1"))
    assert stats.tasks == 8 and sum(stats.tool_calls.values()) > 0
