"""In-process backends never share tasks: each `InProcessBackend` object has a backend name of
its own, so two applications on one store (the default path) keep their tasks apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asyncagents.tasks import (
    InProcessBackend,
    InProcessTurn,
    OpenCodeBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
)
from asyncagents.tasks.manager import default_backend_name
from subprocess_env import python_path

APP = Path(__file__).with_name("inprocess_app.py")
TASKS = 10


async def _reply(turn: InProcessTurn) -> str:
    return "ok"


async def test_each_inprocess_backend_has_a_name_of_its_own() -> None:
    one, two = InProcessBackend(_reply), InProcessBackend(_reply)
    assert one.name.startswith("inprocess:") and two.name.startswith("inprocess:")
    assert len({one.name, two.name, "inprocess"}) == 3
    assert default_backend_name(one) == one.name
    assert default_backend_name(one) == default_backend_name(one)  # stable for the object
    async with OpenCodeBackend("http://127.0.0.1:4096/") as server:
        assert server.name == default_backend_name(server) == "http://127.0.0.1:4096"


def test_a_backend_without_a_name_gets_one_of_its_own() -> None:
    class Nameless:
        pass

    names = {default_backend_name(Nameless()) for _ in range(2)}  # type: ignore[arg-type]
    assert len(names) == 2
    assert all(name.startswith("nameless:") for name in names)


async def test_the_configured_name_wins_and_a_new_backend_object_does_not_adopt(
    tmp_path: Path,
) -> None:
    store_path = tmp_path / "tasks.sqlite3"
    config = TaskManagerConfig(poll_interval=0.2, wake="never")
    first = InProcessBackend(_reply)
    async with TaskManager(first, SQLiteTaskStore(store_path), config) as manager:
        assert manager.backend_name == first.name
        parent = str((await first.create_session())["id"])
        task = await manager.task(parent, "hello", agent="build")
        await manager.output(task.id, block=True, timeout=10)
    named = TaskManagerConfig(backend_name="mine")
    async with TaskManager(InProcessBackend(_reply), SQLiteTaskStore(store_path), named) as other:
        assert other.backend_name == "mine"
        assert await other.store.list_tasks(backend="mine") == []
        kept = await other.store.get(task.id)
    assert kept is not None and kept.backend == first.name and kept.result == "ok"


@pytest.mark.parametrize("store_env", ["XDG_STATE_HOME", "ASYNCAGENTS_TASKS_DB"])
def test_two_inprocess_apps_on_the_default_store_keep_their_tasks(
    tmp_path: Path, store_env: str
) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ASYNCAGENTS_TASKS_DB",)}
    env["PYTHONPATH"] = python_path()
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    if store_env == "ASYNCAGENTS_TASKS_DB":
        env["ASYNCAGENTS_TASKS_DB"] = str(tmp_path / "shared.sqlite3")
    apps = [
        subprocess.Popen(
            [sys.executable, str(APP), name, str(sync), str(TASKS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    reports = []
    for app in apps:
        try:
            out, err = app.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for other in apps:
                other.kill()
            pytest.fail("an in-process app did not finish within 180 s")
        assert app.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    expected = {"tasks": TASKS, "completed": TASKS, "not_found": 0, "results_ok": TASKS}
    assert reports == [expected, expected]
    store = (
        tmp_path / "shared.sqlite3"
        if store_env == "ASYNCAGENTS_TASKS_DB"
        else tmp_path / "state" / "asyncagents" / "tasks.sqlite3"
    )
    assert store.is_file()  # both used the one default store
