"""``asyncagents serve`` options of the admission queue: named as the config fields, passed to
the manager, and refused with a clear error naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncagents import cli
from asyncagents.service.server import ServeOptions, build_manager

URL = "http://127.0.0.1:9"


def limits(*options: str) -> dict[str, object]:
    args = cli._parser().parse_args(["serve", "--opencode", URL, *options])
    return cli._limits(args)


def test_every_limit_option_maps_to_its_config_field() -> None:
    assert limits() == {}
    assert limits(
        "--max-running", "3",
        "--max-running-per-parent", "2",
        "--max-queued-per-parent", "50",
        "--max-depth", "2",
        "--max-running-per-agent", "build=1",
        "--max-running-per-agent", "plan=2",
        "--max-running-per-model", "anthropic/claude-sonnet-4=2",
        "--max-running-per-model", "default=4",
    ) == {
        "max_running": 3,
        "max_running_per_parent": 2,
        "max_queued_per_parent": 50,
        "max_depth": 2,
        "max_running_per_agent": {"build": 1, "plan": 2},
        "max_running_per_model": {"anthropic/claude-sonnet-4": 2, "default": 4},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-running", "0"], "--max-running: Input should be greater than or equal to 1"),
        (["--max-depth", "0"], "--max-depth: Input should be greater than or equal to 1"),
        (
            ["--max-queued-per-parent", "0"],
            "--max-queued-per-parent: Input should be greater than or equal to 1",
        ),
        (
            ["--max-running-per-agent", "build"],
            "--max-running-per-agent 'build': give AGENT=N, a name and a number",
        ),
        (
            ["--max-running-per-model", "a/b=many"],
            "--max-running-per-model 'a/b=many': give PROVIDER/MODEL=N, a name and a number",
        ),
        (
            ["--max-running-per-model", "a/b=0"],
            "--max-running-per-model: Value error, the cap of 'a/b' must be 1 or more, got 0",
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
    options = ServeOptions(
        opencode_url=URL,
        store_path=tmp_path / "tasks.sqlite3",
        limits={"max_running": 3, "max_running_per_model": {"p/m": 1}, "max_depth": 2},
    )
    manager = build_manager(options)
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
        "--max-running N Most tasks running at once on this backend, all workers together; "
        "more wait in the queue. (default 5)",
        "--max-queued-per-parent N",
        "--max-running-per-parent N",
        "--max-depth N",
        "--max-running-per-agent AGENT=N",
        "--max-running-per-model PROVIDER/MODEL=N",
    ):
        assert option in text
