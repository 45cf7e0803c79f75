"""The portable dict path gives the forks the dict probe gives.

On CPython 3.11 to 3.13 (not free-threaded) the Rust walk reads dict tables itself
(`rust/src/input/dict.rs`). On any other interpreter the crate compiles `table::enabled` as
`false`, and every lookup is CPython's own: the portable path, which a newer CPython the
layout is not written down for takes. `ASYNCAGENTS_PORTABLE_DICTS=1` makes the same function
answer `false` on a known one, so a subprocess started with it runs the path an unknown
version runs, and its forks are compared with this process's, on every generated shape and on
faulty input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from asyncagents import _core, build_fork_context
from subprocess_env import python_path

BENCHES = Path(__file__).resolve().parents[1] / "benches"
sys.path.insert(0, str(BENCHES))

from generate import SHAPES, session_objects  # noqa: E402


def faulty() -> dict[str, list[Any]]:
    """Sessions with a fault where the walk reads: a part's text not a string, a message's
    parts not a list (both refused), a key that is not a string (passed over)."""
    text_fault = json.loads(json.dumps(session_objects(20, "mixed")))
    for part in text_fault[-1]["parts"]:
        if part["type"] == "text":
            part["text"] = 5
    parts_fault = json.loads(json.dumps(session_objects(20, "legacy")))
    parts_fault[-2]["parts"] = "none"
    key_fault = json.loads(json.dumps(session_objects(20, "tool_ascii")))
    key_fault[-1]["info"][7] = "seven"
    return {"text": text_fault, "parts": parts_fault, "key": key_fault}


def forks() -> dict[str, Any]:
    """Each case's fork (text and stats) or the error it raised, by name."""
    cases: dict[str, list[Any]] = {
        f"{shape}/{size}": session_objects(size, shape)
        for shape in sorted(SHAPES)
        for size in (10, 200)
    }
    cases.update({f"fault/{name}": messages for name, messages in faulty().items()})
    out: dict[str, Any] = {}
    for name, messages in cases.items():
        try:
            ctx = build_fork_context(messages)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            out[name] = {"text": ctx.text, "stats": ctx.stats.model_dump(mode="json")}
    return out


SCRIPT = """
import json, sys
from asyncagents import _core
sys.path.insert(0, sys.argv[1])
import test_portable_dicts as t
print(json.dumps({"probes": _core._probes_dict_tables(), "forks": t.forks()}))
"""


def test_the_dict_probe_is_on_exactly_where_the_table_layout_is_known():
    known = (
        sys.implementation.name == "cpython"
        and (3, 11) <= sys.version_info[:2] <= (3, 13)
        and not sysconfig.get_config_var("Py_GIL_DISABLED")
    )
    assert os.environ.get("ASYNCAGENTS_PORTABLE_DICTS") != "1"
    assert _core._probes_dict_tables() is known


def test_the_portable_path_gives_the_same_forks_as_the_dict_probe():
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "ASYNCAGENTS_PORTABLE_DICTS": "1",
        "PYTHONPATH": python_path(tests, BENCHES),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tests)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    portable = json.loads(done.stdout)
    assert portable["probes"] is False
    here = forks()
    assert len(here) == 2 * len(SHAPES) + 3
    assert {name: fork["error"] for name, fork in here.items() if "error" in fork} == {
        "fault/text": "ForkInputError: messages[19].parts[1].text: expected a string",
        "fault/parts": "ForkInputError: messages[18].parts: expected an array",
    }
    for name, fork in here.items():
        assert portable["forks"][name] == fork, name


def test_only_a_value_of_1_asks_for_the_portable_path():
    env = {**os.environ, "ASYNCAGENTS_PORTABLE_DICTS": "0", "PYTHONPATH": python_path()}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from asyncagents import _core; _core.from_objects([]);"
            " print(_core._probes_dict_tables())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(_core._probes_dict_tables())
