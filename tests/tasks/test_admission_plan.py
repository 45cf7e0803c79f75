"""The admission planner (`asyncagents.tasks.admission`) as properties over random queues: no
cap is ever passed, nothing that fits is left waiting, FIFO within a parent except for a task a
cap holds back, and parents served in turn."""

from __future__ import annotations

from collections import Counter

from asyncagents.tasks.admission import (
    Caps,
    Counts,
    Entry,
    fair_order,
    place_of,
    plan,
    turn_keys,
)
from hypothesis import given, settings
from hypothesis import strategies as st

PARENTS = ["p0", "p1", "p2", "p3"]
AGENTS = ["build", "plan"]
MODELS = [None, "x/big"]

entries_st = st.lists(
    st.tuples(
        st.sampled_from(PARENTS),
        st.sampled_from(AGENTS),
        st.sampled_from(MODELS),
        st.booleans(),  # running
        st.booleans(),  # ready
    ),
    max_size=40,
).map(
    lambda rows: [
        Entry(f"t{i:02d}", p, a, m, created_at=i, running=r, ready=ready or r)
        for i, (p, a, m, r, ready) in enumerate(rows)
    ]
)
caps_st = st.builds(
    Caps,
    max_running=st.one_of(st.none(), st.integers(1, 12)),
    per_parent=st.one_of(st.none(), st.integers(1, 4)),
    per_agent=st.dictionaries(st.sampled_from(AGENTS), st.integers(1, 4), max_size=2),
    per_model=st.dictionaries(st.sampled_from(["default", "x/big"]), st.integers(1, 4)),
)
last_st = st.dictionaries(st.sampled_from(PARENTS), st.integers(0, 100), max_size=4)


def over(counts: Counts, before: Counts, caps: Caps) -> list[str]:
    """Caps that `counts` passes and that were not passed already before the plan."""
    out = []
    if caps.max_running is not None and counts.total > max(caps.max_running, before.total):
        out.append("max_running")
    for key, n in counts.by_parent.items():
        if caps.per_parent is not None and n > max(caps.per_parent, before.by_parent[key]):
            out.append(f"parent {key}")
    for key, n in counts.by_agent.items():
        cap = caps.per_agent.get(key)
        if cap is not None and n > max(cap, before.by_agent[key]):
            out.append(f"agent {key}")
    for key, n in counts.by_model.items():
        cap = caps.per_model.get(key)
        if cap is not None and n > max(cap, before.by_model[key]):
            out.append(f"model {key}")
    return out


@settings(max_examples=300, deadline=None)
@given(entries=entries_st, caps=caps_st, last=last_st, limit=st.integers(0, 50))
def test_plan_keeps_every_cap_and_leaves_nothing_that_fits(
    entries: list[Entry], caps: Caps, last: dict[str, int], limit: int
) -> None:
    chosen = plan(entries, last, caps, limit)
    assert len(chosen) <= limit
    assert len({e.id for e in chosen}) == len(chosen)
    assert all(not e.running and e.ready for e in chosen)
    before = Counts.of(entries)
    after = Counts.of(entries)
    for entry in chosen:
        assert not after.blockers(entry, caps)  # each one fit when it was admitted
        after.add(entry)
    assert over(after, before, caps) == []
    picked = {e.id for e in chosen}
    waiting = [e for e in entries if not e.running and e.ready and e.id not in picked]
    if len(chosen) < limit:
        # nothing left waiting would fit now
        assert all(after.blockers(e, caps) for e in waiting)
    # FIFO within a parent: an older task left waiting while a newer one of its parent started
    # is held back by a cap
    for entry in waiting:
        newer = [c for c in chosen if c.parent == entry.parent and c.created_at > entry.created_at]
        if newer:
            assert after.blockers(entry, caps)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(1, 12), min_size=2, max_size=4),
    slots=st.integers(1, 30),
)
def test_parents_take_turns_whatever_the_order_they_asked_in(counts: list[int], slots: int) -> None:
    """Parent 0 asked for all of its tasks first, then parent 1, ...: with only max_running,
    the tasks started differ by at most one between parents that still have some waiting."""
    entries = []
    for p, n in enumerate(counts):
        entries += [
            Entry(f"{p}-{k:02d}", f"p{p}", "build", None, created_at=len(entries) + k,
                  running=False)
            for k in range(n)
        ]  # fmt: skip
    chosen = plan(entries, {}, Caps(max_running=slots), limit=100)
    assert len(chosen) == min(slots, sum(counts))
    started = Counter(e.parent for e in chosen)
    unfinished = [f"p{p}" for p, n in enumerate(counts) if started[f"p{p}"] < n]
    if unfinished:
        low = min(started[p] for p in unfinished)
        assert all(started[f"p{p}"] <= low + 1 for p in range(len(counts)))
    # and within each parent, oldest first
    for p in range(len(counts)):
        mine = [e.created_at for e in chosen if e.parent == f"p{p}"]
        assert mine == sorted(mine)


def test_one_slot_at_a_time_the_parent_served_longest_ago_goes_first() -> None:
    entries = [Entry(f"a{k}", "pa", "build", None, created_at=k, running=False) for k in range(3)]
    entries += [Entry("b0", "pb", "build", None, created_at=10, running=False)]
    last: dict[str, int] = {}
    order = []
    for now in range(4):
        [one] = plan(entries, last, Caps(max_running=1), limit=1)
        order.append(one.id)
        last[one.parent] = turn_keys(now, 1, last)[0]
        entries = [e for e in entries if e.id != one.id]
    assert order == ["a0", "b0", "a1", "a2"]


def test_place_and_blockers_of_a_queued_task() -> None:
    entries = [
        Entry("r1", "pa", "build", None, created_at=0, running=True),
        Entry("r2", "pb", "plan", "x/big", created_at=1, running=True),
        Entry("q1", "pa", "build", None, created_at=2, running=False),
        Entry("q2", "pc", "plan", "x/big", created_at=3, running=False, ready=False),
    ]
    caps = Caps(max_running=2, per_agent={"plan": 1}, per_model={"x/big": 1})
    place = place_of("q2", entries, {"pa": 5}, caps)
    assert place is not None
    # pc was never served: its task goes before pa's in the fair order
    assert (place.position, place.queued, place.running, place.ready) == (1, 2, 2, False)
    assert [(b.name, b.running, b.cap, b.scope) for b in place.blockers] == [
        ("max_running", 2, 2, "on this server"),
        ("max_running_per_agent", 1, 1, "with agent plan"),
        ("max_running_per_model", 1, 1, "on model x/big"),
    ]
    assert place_of("r1", entries, {}, caps) is None
    assert [e.id for e in fair_order(entries, {"pa": 5})] == ["q2", "q1"]
    # a key after every key given before, even from a clock behind
    assert turn_keys(1, 2, {"pa": 5_000}) == [5_001, 5_002]


def test_a_try_whose_backoff_is_not_over_is_skipped_without_blocking_the_others() -> None:
    entries = [
        Entry("r1", "pa", "build", None, created_at=0, running=True),
        # the oldest queued task of its parent, waiting out its backoff until t=1000
        Entry("q1", "pa", "build", None, created_at=1, running=False, not_before=1_000),
        Entry("q2", "pa", "build", None, created_at=2, running=False),
        Entry("q3", "pb", "build", None, created_at=3, running=False, not_before=500),
    ]
    caps = Caps(max_running=3)
    assert [e.id for e in plan(entries, {}, caps, 10, now=400)] == ["q2"]
    assert [e.id for e in plan(entries, {}, caps, 10, now=999)] == ["q2", "q3"]
    # once it is over, it is first in its parent's line again (two slots left)
    assert [e.id for e in plan(entries, {}, caps, 10, now=1_000)] == ["q1", "q3"]
    # without a clock (a place in line), it stands first in its parent's queue
    assert [e.id for e in fair_order(entries, {})] == ["q1", "q3", "q2"]
    place = place_of("q1", entries, {}, caps)
    assert place is not None and (place.position, place.blockers) == (1, ())
