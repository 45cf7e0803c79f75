"""The `asyncagents fork` command: sample by default, files, stdin, --stats, --json, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from asyncagents import build_fork_context
from asyncagents.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = (resources.files("asyncagents") / "data" / "sample_session.json").read_bytes()


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "asyncagents", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_sample_is_a_real_compacted_session() -> None:
    ctx = build_fork_context(SAMPLE)
    assert ctx.stats.original_count == 45
    assert ctx.stats.compaction_detected
    assert ctx.stats.compaction_slice_index == 35


def test_no_file_runs_on_the_shipped_sample() -> None:
    done = run("fork")
    assert done.returncode == 0
    assert done.stdout.decode("utf-8") == build_fork_context(SAMPLE).text + "\n"
    assert done.stderr == b""


def test_stats_go_to_stderr_as_camel_case_json() -> None:
    done = run("fork", "--stats")
    assert done.returncode == 0
    stats = json.loads(done.stderr)
    assert stats == build_fork_context(SAMPLE).stats.model_dump(by_alias=True)
    assert stats["compactionSliceIndex"] == 35
    assert stats["tierDistribution"] == {"tier1": 5, "tier2": 6, "tier3": 0}


def test_json_prints_text_and_stats() -> None:
    done = run("fork", "--json")
    assert done.returncode == 0
    payload = json.loads(done.stdout)
    ctx = build_fork_context(SAMPLE)
    assert payload == {"text": ctx.text, "stats": ctx.stats.model_dump(by_alias=True)}


def test_file_and_stdin_give_the_same_text(tmp_path: Path) -> None:
    source = FIXTURES / "child_messages.json"
    from_file = run("fork", str(source))
    from_stdin = run("fork", "-", stdin=source.read_bytes())
    assert from_file.returncode == from_stdin.returncode == 0
    assert from_file.stdout == from_stdin.stdout
    assert from_file.stdout.decode("utf-8") == build_fork_context(source.read_bytes()).text + "\n"


def test_an_opencode_export_document_is_accepted(tmp_path: Path) -> None:
    messages = json.loads(SAMPLE)
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"info": {"id": "ses_x"}, "messages": messages}))
    done = run("fork", str(export))
    assert done.returncode == 0
    assert done.stdout.decode("utf-8") == build_fork_context(SAMPLE).text + "\n"


def test_python_engine_prints_the_same_bytes() -> None:
    assert run("fork", "--engine", "python").stdout == run("fork").stdout


def test_an_empty_session_prints_nothing() -> None:
    done = run("fork", "-", stdin=b"[]")
    assert (done.returncode, done.stdout) == (0, b"")


@pytest.mark.parametrize(
    ("stdin", "line"),
    [
        (b"[{", "asyncagents: bad session input: json: invalid JSON: "),
        (b'[{"info": 5, "parts": []}]', "asyncagents: bad session input: messages[0].info: "),
        (b"\xff\xfe", "asyncagents: bad session input: json: invalid UTF-8"),
        (b'{"no": "messages"}', "asyncagents: bad session input: messages: expected an array"),
    ],
)
def test_bad_input_exits_2_with_one_line(stdin: bytes, line: str) -> None:
    done = run("fork", "-", stdin=stdin)
    assert done.returncode == 2
    assert done.stdout == b""
    err = done.stderr.decode("utf-8")
    assert err.count("\n") == 1 and err.startswith(line), err
    assert "Traceback" not in err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    done = run("fork", str(tmp_path / "nope.json"))
    assert done.returncode == 2
    assert done.stderr.decode("utf-8").startswith("asyncagents: cannot read ")
    assert "Traceback" not in done.stderr.decode("utf-8")


def test_main_returns_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fork", "--stats"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.err)["originalCount"] == 45


def test_the_console_script_is_installed() -> None:
    script = shutil.which("asyncagents")
    assert script is not None, "pip install . must put the asyncagents command on PATH"
    done = subprocess.run([script, "fork", "--json"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0
    assert json.loads(done.stdout)["stats"]["originalCount"] == 45
