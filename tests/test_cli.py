"""The `asyncagents` command: --version; `fork` on the sample by default, files, stdin, the
summary of --stats, --full, -o, --json, bad input."""

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


SUMMARY = (
    "asyncagents fork: the sample session shipped with the package, 45 messages (608,050 bytes)\n"
    "  kept:          17 messages in a context of 21,246 characters (budget 200,000)\n"
    "  compaction:    28 messages cut before the latest summary; it and its tail of 7 kept\n"
    "  budget:        nothing dropped: every kept message fits\n"
    "  tool results:  11: the 5 newest whole, the next 6 to 3,000 characters, 0 older to 500\n"
    "                 2 cut (1 keeping head and tail), 0 cleared by OpenCode before\n"
)


def test_version() -> None:
    from importlib.metadata import version

    import asyncagents

    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.decode() == f"asyncagents {asyncagents.__version__}\n"
    assert asyncagents.__version__ == version("asyncagents")
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'\nversion = "{asyncagents.__version__}"\n' in pyproject


def test_stats_print_a_summary_of_what_was_kept_and_cut() -> None:
    ctx = build_fork_context(SAMPLE)
    assert len(SAMPLE) == 608_050 and len(ctx.text) == 21_246
    assert ctx.stats.final_count == 17 and ctx.stats.compaction_tail_messages == 7
    done = run("fork", "--stats")
    assert done.returncode == 0
    assert done.stderr == b""
    assert done.stdout.decode("utf-8") == SUMMARY + (
        "context: not shown (--full prints it, -o FILE writes it to a file)\n"
    )


def test_full_prints_the_summary_then_the_context() -> None:
    done = run("fork", "--stats", "--full")
    assert done.returncode == 0
    assert done.stdout.decode("utf-8") == SUMMARY + "\n" + build_fork_context(SAMPLE).text + "\n"
    assert run("fork", "--full").stdout == done.stdout


def test_output_writes_the_context_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "context.txt"
    done = run("fork", "-o", str(target))
    assert done.returncode == 0
    assert done.stdout.decode("utf-8") == SUMMARY + (
        f"context: 21,246 characters written to {target}\n"
    )
    assert target.read_text("utf-8") == build_fork_context(SAMPLE).text + "\n"
    missing = run("fork", "-o", str(tmp_path / "no" / "dir" / "x.txt"))
    assert missing.returncode == 2
    assert missing.stderr.decode() == (
        f"asyncagents: cannot write {tmp_path / 'no' / 'dir' / 'x.txt'}: "
        "No such file or directory\n"
    )


def test_summary_of_a_session_without_compaction_that_does_not_fit() -> None:
    # 30 user messages of 10,000 characters: no compaction; the budget keeps the newest 19
    messages = [
        {
            "info": {"id": f"msg_{i:03}", "role": "user", "sessionID": "ses_x"},
            "parts": [{"type": "text", "text": "x" * 10_000}],
        }
        for i in range(30)
    ]
    ctx = build_fork_context(messages)
    done = run("fork", "-", "--stats", stdin=json.dumps(messages).encode())
    assert done.returncode == 0
    kept, removed = ctx.stats.final_count, ctx.stats.removed_messages
    assert (kept + removed, ctx.stats.compaction_detected) == (30, False) and removed > 0
    assert done.stdout.decode() == (
        f"asyncagents fork: standard input, 30 messages ({len(json.dumps(messages)):,} bytes)\n"
        f"  kept:          {kept} messages in a context of {len(ctx.text):,} characters "
        "(budget 200,000)\n"
        "  compaction:    none in the session\n"
        f"  budget:        dropped the {removed} oldest messages to fit\n"
        "  tool results:  none\n"
        "context: not shown (--full prints it, -o FILE writes it to a file)\n"
    )


def test_json_goes_alone() -> None:
    done = run("fork", "--json", "--stats")
    assert done.returncode == 2
    assert done.stderr.decode() == "asyncagents: --json goes alone, without --stats, --full or -o\n"


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
    summary = run("fork", "-", "--stats", stdin=b"[]")
    assert summary.stdout.decode() == (
        "asyncagents fork: standard input, 0 messages (2 bytes)\n"
        "  nothing to inject: the session has no message a child could use\n"
    )


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


def test_main_returns_the_exit_status(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["fork", "--stats"]) == 0
    assert capsysbinary.readouterr().out.decode().startswith(SUMMARY)


def test_the_console_script_is_installed() -> None:
    script = shutil.which("asyncagents")
    assert script is not None, "pip install . must put the asyncagents command on PATH"
    done = subprocess.run([script, "fork", "--json"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0
    assert json.loads(done.stdout)["stats"]["originalCount"] == 45


def test_the_readme_shows_what_its_first_command_prints() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text("utf-8")
    assert "python3 -m pip install . && asyncagents fork --stats\n" in readme
    shown = SUMMARY + "context: not shown (--full prints it, -o FILE writes it to a file)\n"
    assert f"```\n{shown}```\n" in readme


def test_summary_of_a_newest_message_over_the_budget() -> None:
    messages = [
        {
            "info": {"id": "msg_001", "role": "user", "sessionID": "ses_x"},
            "parts": [{"type": "text", "text": "y" * 300_000}],
        }
    ]
    ctx = build_fork_context(messages)
    assert ctx.stats.hard_capped
    done = run("fork", "-", "--stats", stdin=json.dumps(messages).encode())
    assert done.returncode == 0
    lines = done.stdout.decode().splitlines()
    assert lines[1] == (
        f"  kept:          1 message in a context of {len(ctx.text):,} characters (budget 200,000)"
    )
    assert lines[3] == (
        "  budget:        the newest message alone was over the budget: its text cut head and tail"
    )
