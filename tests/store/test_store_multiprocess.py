"""Four processes on one store (one SQLite file; one PostgreSQL database) at the same time.

They take over 200 orphaned tasks (completing each with a notice) and claim and delete 500
seeded notices plus those 200: every task must be taken exactly once and completed by its taker,
every notice claimed exactly once, and nothing left over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from asyncagents.tasks.models import Notice, NoticeKind, Task, TaskStatus
from asyncagents.tasks.store import SQLiteTaskStore, TaskStore
from asyncagents.tasks.store.postgres import PostgresTaskStore
from subprocess_env import python_path

WORKER = Path(__file__).with_name("store_worker.py")
N_WORKERS, N_TASKS, N_NOTICES = 4, 200, 500


async def seed(store: TaskStore) -> tuple[set[str], set[str]]:
    holder = Task(
        id="tsk_holder",
        parent_session_id="ses_parent",
        prompt="holds the seeded notices",
        agent="general",
        description="holder",
        status=TaskStatus.COMPLETED,
        backend="b1",
    )
    await store.insert(holder)
    notices = set()
    for i in range(N_NOTICES):
        notice = Notice(
            id=f"ntc_seed_{i:04d}",
            task_id=holder.id,
            parent_session_id="ses_parent",
            kind=NoticeKind.COMPLETED,
            turn=1,
            text=f"notice {i}",
            backend="b1",
            created_at=i,
        )
        await store.update(holder.id, lambda t, n=notice: (t, n))  # type: ignore[misc]
        notices.add(notice.id)
    tasks = set()
    for i in range(N_TASKS):
        task = Task(
            id=f"tsk_orphan_{i:04d}",
            parent_session_id="ses_parent",
            prompt=f"orphan {i}",
            agent="general",
            description=f"orphan {i}",
            backend="b1",
            owner=f"dead_{i % 3}",  # owners without a lease: crashed managers
            created_at=i,
        )
        await store.insert(task)
        tasks.add(task.id)
    return tasks, notices


def run_workers(kind: str, target: str) -> list[dict[str, list[str]]]:
    env = {**os.environ, "PYTHONPATH": python_path()}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), kind, target, f"worker_{i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(N_WORKERS)
    ]
    try:
        for proc in procs:  # every worker has opened the store before any starts
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "ready\n", f"worker did not start: {line!r} {proc.stderr}"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_four_processes_take_and_claim_each_item_exactly_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        target = str(tmp_path / "shared.db")
        store: TaskStore = SQLiteTaskStore(target)
    else:
        target = request.getfixturevalue("pg_dsn")
        store = PostgresTaskStore(target)
    await store.open()
    try:
        tasks, notices = await seed(store)
        results = run_workers(kind, target)

        taken = Counter(t for r in results for t in r["taken"])
        assert set(taken) == tasks
        assert max(taken.values()) == 1
        claimed = Counter(n for r in results for n in r["claimed"])
        assert set(claimed) == notices | {f"ntc_done_{t}" for t in tasks}
        assert max(claimed.values()) == 1
        assert await store.notices() == []
        for i, result in enumerate(results):
            done = await store.list_tasks(owner=f"worker_{i}")
            assert sorted(t.id for t in done) == sorted(result["taken"])
            assert all(t.status is TaskStatus.COMPLETED for t in done)
            assert all(t.result == f"done by worker_{i}" for t in done)
        assert len(await store.list_tasks()) == N_TASKS + 1
        # the work was shared: more than one process did some of it
        assert sum(1 for r in results if r["taken"] or r["claimed"]) >= 2
    finally:
        await store.close()
