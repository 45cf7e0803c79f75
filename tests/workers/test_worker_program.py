"""The worker program itself: its failures are machine-readable and its exit status says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fake_opencode import FakeOpenCodeProcess
from workers_support import REPO, WORKER, _env


def run_worker(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), *args],
        cwd=REPO,
        env=_env(),
        input="",  # a pipe closed at once: the end of the commands
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_store_that_is_not_ours_is_a_fatal_line_naming_it(
    fake_server: FakeOpenCodeProcess, tmp_path: Path
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    done = run_worker("--url", fake_server.url, "--sqlite", str(path))
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["fatal"]
    assert lines[0]["error"].startswith("StoreError: ")
    assert str(path) in lines[0]["error"]
    assert path.read_text() == "not a database\n" * 100  # left as it was


def test_stdin_at_its_end_stops_the_worker_cleanly(
    fake_server: FakeOpenCodeProcess, tmp_path: Path
) -> None:
    done = run_worker("--url", fake_server.url, "--sqlite", str(tmp_path / "t.sqlite3"))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["event"] == "ready"
    assert events[0]["backend_name"] == fake_server.url
    assert events[-1] == {"event": "stopped", "reason": "stdin closed"}


def test_launch_without_parents_is_a_usage_error() -> None:
    done = run_worker("--url", "http://127.0.0.1:9", "--sqlite", "x.sqlite3", "--launch", "3")
    assert done.returncode == 2
    assert "--launch needs --parents" in done.stderr
