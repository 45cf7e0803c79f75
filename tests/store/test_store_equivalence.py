"""The three stores answer alike: random sequences of every call, run on each, same answers.

`InMemoryTaskStore` is the reference (the contract in a few lines of Python); SQLite and a real
PostgreSQL must give the same result for every call. Times are chosen so that no answer depends
on the clock: leases and claims either live for ten minutes or expire at once, and a notice is
either due now or in the far future.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from asyncagents.tasks import StoreError
from asyncagents.tasks.models import Notice, NoticeKind, Task, TaskStatus
from asyncagents.tasks.store import InMemoryTaskStore, SQLiteTaskStore, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

FAR = 10**15  # ms: a retry time that is never due during the test
PARENTS = st.sampled_from(["p1", "p2"])
BACKENDS = st.sampled_from(["b1", "b2"])
OWNERS = st.sampled_from(["m1", "m2"])
MAYBE = st.none

inserts = st.tuples(
    st.just("insert"),
    st.integers(0, 7),
    PARENTS,
    BACKENDS,
    OWNERS | MAYBE(),
    st.integers(0, 3),
    st.sampled_from(list(TaskStatus)),
)
renewals = st.tuples(st.just("renew"), OWNERS, BACKENDS, st.sampled_from([0, 600]))
take_overs = st.tuples(st.just("take_over"), OWNERS, BACKENDS, st.sampled_from([1, 2, 10]))
claims = st.tuples(
    st.just("claim"),
    OWNERS,
    BACKENDS,
    st.sampled_from([0, 600]),
    PARENTS | MAYBE(),
    st.sampled_from([1, 3, 10]),
)
releases = st.tuples(st.just("release"), st.integers(0, 20), st.integers(1, 3), st.booleans())
completions = st.tuples(st.just("complete"), st.integers(0, 7), st.integers(0, 9), st.booleans())
#: the start of a script: tasks and leases, so that later calls have something to act on
setup = st.one_of(inserts, inserts, renewals)
ops = st.one_of(
    inserts,
    completions,
    completions,
    st.tuples(st.just("set_owner"), st.integers(0, 7), OWNERS | MAYBE()),
    st.tuples(st.just("delete_parent"), PARENTS, BACKENDS | MAYBE()),
    renewals,
    st.tuples(st.just("drop"), OWNERS),
    take_overs,
    take_overs,
    take_overs,
    claims,
    claims,
    releases,
    st.tuples(st.just("delete_notice"), st.integers(0, 9)),
    st.tuples(
        st.just("list"),
        PARENTS | MAYBE(),
        st.sampled_from([None, (), ("running", "resumed"), ("completed",)]),
        BACKENDS | MAYBE(),
        OWNERS | MAYBE(),
    ),
    st.tuples(st.just("notices"), PARENTS | MAYBE(), BACKENDS | MAYBE()),
    st.tuples(
        st.just("prefix"), st.sampled_from(["", "tsk_", "tsk_1", "tsk_9"]), PARENTS | MAYBE()
    ),
    st.tuples(st.just("find"), st.integers(0, 7)),
    st.tuples(st.just("get"), st.integers(0, 7)),
)


def _task(n: int, parent: str, backend: str, owner: str | None, at: int, status: str) -> Task:
    return Task(
        id=f"tsk_{n}",
        parent_session_id=parent,
        session_id=f"ses_{n % 3}",
        prompt=f"prompt {n}",
        agent="general",
        description=f"task {n}",
        status=TaskStatus(status),
        backend=backend,
        owner=owner,
        created_at=at,
        updated_at=0,
    )


def _shape(value: Any) -> Any:
    """A comparable form: records as dicts, a claim's expiry only as present or not."""
    if isinstance(value, Notice):
        dumped = value.model_dump(mode="json")
        dumped["claim_expires_at"] = value.claim_expires_at is not None
        return dumped
    if isinstance(value, Task):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    return value


async def _play(store: TaskStore, script: list[tuple[Any, ...]]) -> list[Any]:
    claimed: list[Notice] = []
    out: list[Any] = []
    for op in script:
        name, args = op[0], op[1:]
        try:
            result: Any
            if name == "insert":
                result = await store.insert(_task(*args))
            elif name == "complete":
                n, k, far = args

                def complete(t: Task, k: int = k, far: bool = far) -> tuple[Task, Notice] | None:
                    if not t.status.active:
                        return None
                    t.status = TaskStatus.COMPLETED
                    return t, Notice(
                        id=f"ntc_{k}",
                        task_id=t.id,
                        parent_session_id=t.parent_session_id,
                        kind=NoticeKind.COMPLETED,
                        turn=t.turn,
                        text=f"notice {k}",
                        backend=t.backend,
                        created_at=k % 4,
                        next_attempt_at=FAR if far else 0,
                    )

                result = await store.update(f"tsk_{n}", complete)
            elif name == "set_owner":
                n, owner = args
                result = await store.update(
                    f"tsk_{n}", lambda t, o=owner: (t.model_copy(update={"owner": o}), None)
                )
            elif name == "delete_parent":
                result = await store.delete_parent(*args)
            elif name == "renew":
                result = await store.renew_lease(*args)
            elif name == "drop":
                result = await store.drop_lease(*args)
            elif name == "take_over":
                result = await store.take_over(*args)
            elif name == "claim":
                owner, backend, ttl, parent, limit = args
                result = await store.claim_notices(
                    owner, backend, ttl, parent_session_id=parent, limit=limit
                )
                claimed.extend(result)
            elif name == "release":
                k, attempts, far = args
                if not claimed:
                    continue
                notice = claimed[k % len(claimed)].model_copy(
                    update={
                        "attempts": attempts,
                        "last_error": f"attempt {attempts} failed",
                        "next_attempt_at": FAR if far else 0,
                    }
                )
                result = await store.release_notice(notice)
            elif name == "delete_notice":
                result = await store.delete_notice(f"ntc_{args[0]}")
            elif name == "list":
                parent, statuses, backend, owner = args
                result = await store.list_tasks(
                    parent,
                    None if statuses is None else [TaskStatus(s) for s in statuses],
                    backend=backend,
                    owner=owner,
                )
            elif name == "notices":
                result = await store.notices(args[0], backend=args[1])
            elif name == "prefix":
                result = await store.ids_with_prefix(args[0], args[1], limit=3)
            elif name == "find":
                result = await store.find_by_session(f"ses_{args[0]}")
            else:
                result = await store.get(f"tsk_{args[0]}")
        except StoreError:
            result = "StoreError"
        out.append((op, _shape(result)))
    out.append(("final tasks", _shape(await store.list_tasks())))
    out.append(("final notices", _shape(await store.notices())))
    return out


_SCHEMAS = itertools.count(1)


def _insert(n: int, owner: str | None) -> tuple[Any, ...]:
    return ("insert", n, "p1", "b1", owner, 0, TaskStatus.RUNNING)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# scenarios random scripts reach rarely, played on every run
@example(  # a live lease keeps its tasks; a lease that expired at once does not
    first=[_insert(1, "m1"), _insert(2, "m2"), ("renew", "m1", "b1", 600)],
    then=[("renew", "m2", "b1", 0), ("take_over", "m2", "b1", 10), ("take_over", "m1", "b1", 10)],
)
@example(  # a release by a claimer whose claim expired and was taken again changes nothing
    first=[_insert(1, None)],
    then=[
        ("complete", 1, 4, False),
        ("claim", "m1", "b1", 0, None, 10),
        ("claim", "m2", "b1", 600, None, 10),
        ("release", 0, 2, False),
        ("notices", None, None),
        ("release", 1, 3, True),
        ("claim", "m1", "b1", 600, None, 10),
    ],
)
@example(  # ties in time are broken by id, the same way everywhere
    first=[_insert(3, None), _insert(1, None), _insert(2, "m1")],
    then=[("list", None, None, None, None), ("take_over", "m2", "b1", 2)],
)
@given(first=st.lists(setup, min_size=2, max_size=12), then=st.lists(ops, min_size=10, max_size=40))
def test_sqlite_and_postgres_answer_like_the_in_memory_store(
    first: list[tuple[Any, ...]], then: list[tuple[Any, ...]], tmp_path: Path, pg_dsn: str
) -> None:
    script = first + then
    n = next(_SCHEMAS)

    async def run() -> None:
        stores: list[TaskStore] = [
            InMemoryTaskStore(),
            SQLiteTaskStore(tmp_path / f"run_{n}.db"),
            PostgresTaskStore(pg_dsn, schema=f"run_{n}", min_size=1, max_size=1),
        ]
        try:
            expected, *others = [await _play(store, script) for store in stores]
            for store, got in zip(stores[1:], others, strict=True):
                for want, have in zip(expected, got, strict=True):
                    assert have == want, f"{type(store).__name__} differs at {want[0]!r}"
        finally:
            for store in stores:
                await store.close()

    asyncio.run(run())
