"""Finding the opencode binary: installed on first use; a missing one fails the suite, it is
never skipped."""

from __future__ import annotations

import os
from pathlib import Path

import e2e_support
import pytest
from e2e_support import opencode_binary


def test_the_env_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "opencode"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("ASYNCAGENTS_OPENCODE_BIN", str(binary))
    assert opencode_binary() == str(binary)


def test_a_bad_env_variable_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCAGENTS_OPENCODE_BIN", str(tmp_path / "missing"))
    with pytest.raises(pytest.fail.Exception, match="is not an executable file"):
        opencode_binary()


def test_no_binary_anywhere_fails_with_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASYNCAGENTS_OPENCODE_BIN", raising=False)
    monkeypatch.setattr(e2e_support, "LOCAL_BIN", tmp_path / "none" / "opencode")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"scripts/opencode/install\.sh"):
        opencode_binary()


def test_the_repo_install_comes_before_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "local" / "opencode"
    local.parent.mkdir()
    local.write_text("#!/bin/sh\n")
    local.chmod(0o755)
    on_path = tmp_path / "opencode"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    monkeypatch.delenv("ASYNCAGENTS_OPENCODE_BIN", raising=False)
    monkeypatch.setattr(e2e_support, "LOCAL_BIN", local)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert opencode_binary() == str(local)


def test_a_missing_binary_is_installed_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "prefix" / "node_modules" / ".bin" / "opencode"
    script = tmp_path / "install.sh"
    # stands in for scripts/opencode/install.sh: it installs into $ASYNCAGENTS_OPENCODE_PREFIX
    script.write_text(
        'mkdir -p "$ASYNCAGENTS_OPENCODE_PREFIX/node_modules/.bin"\n'
        'b="$ASYNCAGENTS_OPENCODE_PREFIX/node_modules/.bin/opencode"\n'
        'printf "#!/bin/sh\\n" > "$b" && chmod +x "$b"\n'
    )
    npm = tmp_path / "bin" / "npm"
    npm.parent.mkdir()
    npm.write_text("#!/bin/sh\n")
    npm.chmod(0o755)
    monkeypatch.delenv("ASYNCAGENTS_OPENCODE_BIN", raising=False)
    monkeypatch.setattr(e2e_support, "LOCAL_BIN", local)
    monkeypatch.setattr(e2e_support, "INSTALL_SCRIPT", script)
    monkeypatch.setenv("PATH", str(npm.parent) + os.pathsep + "/usr/bin" + os.pathsep + "/bin")
    assert opencode_binary() == str(local)
    assert os.access(local, os.X_OK)
