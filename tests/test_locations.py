"""One home for where state lives and where the service listens: every user of them agrees."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncagents import locations
from asyncagents.cli import _parser
from asyncagents.service.settings import ServeSettings


def test_state_lives_under_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("ASYNCAGENTS_TASKS_DB", raising=False)
    monkeypatch.delenv("ASYNCAGENTS_TOKEN_FILE", raising=False)
    assert locations.state_dir() == tmp_path / "asyncagents"
    assert locations.default_store_path() == tmp_path / "asyncagents" / "tasks.sqlite3"
    assert locations.default_token_path() == tmp_path / "asyncagents" / "token"


def test_without_xdg_state_home_state_is_in_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert locations.state_dir() == tmp_path / ".local" / "state" / "asyncagents"


def test_files_named_in_the_environment_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCAGENTS_TASKS_DB", str(tmp_path / "db"))
    monkeypatch.setenv("ASYNCAGENTS_TOKEN_FILE", str(tmp_path / "tok"))
    assert locations.default_store_path() == tmp_path / "db"
    assert locations.default_token_path() == tmp_path / "tok"


def test_the_service_listens_where_the_plugin_calls() -> None:
    serve = ServeSettings(opencode="http://127.0.0.1:4096")
    assert (serve.host, serve.port) == ("127.0.0.1", 4097)
    assert locations.DEFAULT_SERVICE_URL == f"http://{serve.host}:{serve.port}"
    install = _parser().parse_args(["opencode", "install"])
    assert install.service == locations.DEFAULT_SERVICE_URL
