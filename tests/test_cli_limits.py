"""``asyncagents serve`` settings of the admission queue: named as the config fields (options,
``ASYNCAGENTS_*`` variables, config-file keys), passed to the manager, and refused with a clear
error naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncagents import cli
from asyncagents.service.server import build_manager
from asyncagents.service.settings import Settings, resolve

URL = "http://127.0.0.1:9"


def settings(*options: str, env: dict[str, str] | None = None) -> Settings:
    return resolve(cli._parser().parse_args(["serve", "--opencode", URL, *options]), env or {})


LIMITS = (
    "max_running",
    "max_running_per_parent",
    "max_queued_per_parent",
    "max_depth",
    "max_running_per_agent",
    "max_running_per_model",
)


def test_every_limit_option_maps_to_its_config_field() -> None:
    config = settings(
        "--max-running", "3",
        "--max-running-per-parent", "2",
        "--max-queued-per-parent", "50",
        "--max-depth", "2",
        "--max-running-per-agent", "build=1",
        "--max-running-per-agent", "plan=2",
        "--max-running-per-model", "anthropic/claude-sonnet-4=2",
        "--max-running-per-model", "default=4",
    ).manager  # fmt: skip
    assert {name: getattr(config, name) for name in LIMITS} == {
        "max_running": 3,
        "max_running_per_parent": 2,
        "max_queued_per_parent": 50,
        "max_depth": 2,
        "max_running_per_agent": {"build": 1, "plan": 2},
        "max_running_per_model": {"anthropic/claude-sonnet-4": 2, "default": 4},
    }
    env = {"ASYNCAGENTS_MAX_RUNNING": "4", "ASYNCAGENTS_MAX_RUNNING_PER_MODEL": "p/m=1,q/n=2"}
    from_env = settings(env=env).manager
    assert (from_env.max_running, from_env.max_running_per_model) == (4, {"p/m": 1, "q/n": 2})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--max-running", "0"],
            "--max-running: Input should be greater than or equal to 1 (got '0')",
        ),
        (["--max-depth", "0"], "--max-depth: Input should be greater than or equal to 1 (got '0')"),
        (
            ["--max-queued-per-parent", "0"],
            "--max-queued-per-parent: Input should be greater than or equal to 1 (got '0')",
        ),
        (["--max-running-per-agent", "build"], "--max-running-per-agent: 'build' is not KEY=VALUE"),
        (
            ["--max-running-per-model", "a/b=many"],
            "--max-running-per-model [a/b]: Input should be a valid integer, unable to parse "
            "string as an integer (got 'many')",
        ),
        (
            ["--max-running-per-model", "a/b=0"],
            "--max-running-per-model: Value error, the cap of 'a/b' must be 1 or more, got 0 "
            "(got {'a/b': '0'})",
        ),
    ],
)
def test_a_bad_limit_is_refused_before_anything_starts(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = cli.main(["serve", "--opencode", URL, "--store", str(tmp_path / "t.db"), *options])
    assert status == 2
    assert capsys.readouterr().err == f"asyncagents serve: {message}\n"
    assert not (tmp_path / "t.db").exists()


async def test_the_limits_reach_the_managers_config_and_caps(tmp_path: Path) -> None:
    given = settings(
        "--store", str(tmp_path / "tasks.sqlite3"),
        "--max-running", "3", "--max-running-per-model", "p/m=1", "--max-depth", "2",
    )  # fmt: skip
    manager = build_manager(given)
    try:
        assert manager.config.max_running == 3 and manager.config.max_depth == 2
        assert manager.admitter.caps.max_running == 3
        assert manager.admitter.caps.per_model == {"p/m": 1}
    finally:
        await manager.aclose()


def test_the_help_names_each_option_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in (
        "--max-running N most tasks running at once on this backend, all workers together; "
        "more wait in the queue (default: 5)",
        "--max-queued-per-parent N",
        "--max-running-per-parent N",
        "--max-depth N",
        "--max-running-per-agent AGENT=N",
        "--max-running-per-model PROVIDER/MODEL=N",
    ):
        assert option in text
