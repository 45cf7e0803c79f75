"""The test PostgreSQL helper: it installs missing binaries, and says so when it cannot."""

from __future__ import annotations

from pathlib import Path

import pg_server
import pytest


def test_missing_binaries_run_the_install_script_and_its_failure_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "install.sh"
    marker = tmp_path / "ran"
    script.write_text(
        f"touch {marker}\necho 'E: Unable to locate package postgresql' >&2\nexit 100\n"
    )
    monkeypatch.delenv("ASYNCAGENTS_PG_BINDIR", raising=False)
    monkeypatch.setattr(pg_server.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(pg_server, "INSTALL_SCRIPT", script)
    with pytest.raises(RuntimeError) as err:
        pg_server.ensure_bindir()
    assert marker.exists()
    assert str(err.value) == (
        "PostgreSQL's server binaries (initdb, postgres) are missing and "
        f"{script} could not install them (exit 100): E: Unable to locate package postgresql"
    )


def test_an_install_that_provides_the_binaries_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "usr" / "lib" / "postgresql" / "16" / "bin"
    script = tmp_path / "install.sh"
    script.write_text(
        f"mkdir -p {bindir} && touch {bindir}/initdb {bindir}/postgres && echo {bindir}\n"
    )
    monkeypatch.delenv("ASYNCAGENTS_PG_BINDIR", raising=False)
    monkeypatch.setattr(
        pg_server.glob, "glob", lambda pattern: [str(bindir)] if bindir.exists() else []
    )
    monkeypatch.setattr(pg_server, "INSTALL_SCRIPT", script)
    assert pg_server.ensure_bindir() == bindir


def test_the_newest_installed_version_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = []
    for version in ("9.6", "15", "13"):
        bindir = tmp_path / version / "bin"
        bindir.mkdir(parents=True)
        (bindir / "initdb").touch()
        (bindir / "postgres").touch()
        dirs.append(str(bindir))
    monkeypatch.delenv("ASYNCAGENTS_PG_BINDIR", raising=False)
    monkeypatch.setattr(pg_server.glob, "glob", lambda pattern: dirs)
    assert pg_server.find_bindir() == tmp_path / "15" / "bin"
