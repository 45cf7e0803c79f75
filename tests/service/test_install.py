"""``asyncagents opencode install``: the plugin file, its settings, its pinned package.

The real npm and a real OpenCode loading the plugin are in tests/e2e/test_opencode_plugin.py;
here a stand-in npm records how it is called.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from asyncagents.opencode import InstallError, install_plugin, plugin_source
from asyncagents.tasks import TOOLS
from subprocess_env import python_path

REPO = Path(__file__).resolve().parents[2]

FAKE_NPM = """#!/bin/sh
# a stand-in for npm: records its arguments, installs a package.json and a lock
echo "$@" >> "$NPM_LOG"
prefix="$3"
spec="$9"
version="${spec##*@}"
mkdir -p "$prefix/node_modules/@opencode-ai/plugin"
echo "{\\"name\\": \\"@opencode-ai/plugin\\", \\"version\\": \\"$version\\"}" \\
  > "$prefix/node_modules/@opencode-ai/plugin/package.json"
deps="{\\"dependencies\\": {\\"@opencode-ai/plugin\\": \\"$version\\"}}"
echo "{\\"packages\\": {\\"\\": $deps}}" > "$prefix/package-lock.json"
"""


def _config(source: str) -> dict[str, object]:
    match = re.search(r"const CONFIG = (\{.*?\n\})\n", source, re.S)
    assert match, source[:500]
    config: dict[str, object] = json.loads(match.group(1))
    return config


def test_plugin_source_carries_the_settings_and_the_tools() -> None:
    source = plugin_source("http://127.0.0.1:5000/", Path("/home/u/.local/state/asyncagents/t"))
    config = _config(source)
    assert config["serviceUrl"] == "http://127.0.0.1:5000"
    assert config["tokenFile"] == "/home/u/.local/state/asyncagents/t"
    assert config["tools"] == [t.model_dump() for t in TOOLS]
    assert [t["name"] for t in config["tools"]] == [  # type: ignore[attr-defined]
        "asyncagents_task",
        "asyncagents_output",
        "asyncagents_list",
        "asyncagents_cancel",
        "asyncagents_clear",
    ]
    assert 'import { tool } from "@opencode-ai/plugin"' in source


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_plugin_source_is_valid_javascript(tmp_path: Path) -> None:
    path = tmp_path / "plugin.mjs"
    path.write_text(plugin_source("http://127.0.0.1:4097", tmp_path / "token"))
    done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    npm = tmp_path / "bin" / "npm"
    npm.parent.mkdir()
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("NPM_LOG", str(log))
    return npm


def test_install_writes_the_plugin_and_pins_the_package(tmp_path: Path, fake_npm: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = install_plugin(
        project,
        "http://127.0.0.1:4097",
        tmp_path / "token",
        opencode_version="1.18.33",
        npm=str(fake_npm),
    )
    assert done.plugin_path == project / ".opencode" / "plugins" / "asyncagents.js"
    assert done.ran_npm and done.opencode_version == "1.18.33"
    assert (tmp_path / "npm.log").read_text().split() == [
        "install",
        "--prefix",
        str(project / ".opencode"),
        "--save-exact",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--omit=peer",
        "@opencode-ai/plugin@1.18.33",
    ]
    assert _config(done.plugin_path.read_text())["serviceUrl"] == "http://127.0.0.1:4097"
    assert sorted(p.name for p in (project / ".opencode" / "plugins").iterdir()) == [
        "asyncagents.js"
    ]
    # a second install with the package in place runs no npm, and rewrites the settings
    again = install_plugin(
        project,
        "http://127.0.0.1:5000",
        tmp_path / "token",
        opencode_version="1.18.33",
        npm=str(fake_npm),
    )
    assert not again.ran_npm
    assert len((tmp_path / "npm.log").read_text().splitlines()) == 1
    assert _config(again.plugin_path.read_text())["serviceUrl"] == "http://127.0.0.1:5000"
    # another OpenCode version: npm runs again for that pin
    third = install_plugin(
        project,
        "http://127.0.0.1:5000",
        tmp_path / "token",
        opencode_version="1.19.0",
        npm=str(fake_npm),
    )
    assert third.ran_npm
    assert (
        (tmp_path / "npm.log").read_text().splitlines()[-1].endswith("@opencode-ai/plugin@1.19.0")
    )


def test_install_without_npm_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(InstallError, match=r"^npm is not on PATH: it is needed once to install "):
        install_plugin(tmp_path, "http://x", tmp_path / "t", opencode_version="1.18.33")


def test_install_reports_a_failing_npm(tmp_path: Path) -> None:
    npm = tmp_path / "npm"
    npm.write_text("#!/bin/sh\necho 'npm error code E404' >&2\nexit 1\n")
    npm.chmod(0o755)
    with pytest.raises(InstallError) as info:
        install_plugin(tmp_path, "http://x", tmp_path / "t", opencode_version="9.9.9", npm=str(npm))
    assert str(info.value) == (
        f"`npm install @opencode-ai/plugin@9.9.9` in {tmp_path / '.opencode'} failed:\n"
        "npm error code E404"
    )


def test_install_into_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="is not a directory"):
        install_plugin(tmp_path / "nope", "http://x", tmp_path / "t", opencode_version="1")


def test_the_command_line(tmp_path: Path, fake_npm: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": python_path(),
        "PATH": f"{fake_npm.parent}{os.pathsep}{os.environ['PATH']}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    env.pop("ASYNCAGENTS_TOKEN_FILE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncagents",
            "opencode",
            "install",
            str(tmp_path),
            "--opencode-version",
            "1.18.33",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    plugin = tmp_path / ".opencode" / "plugins" / "asyncagents.js"
    assert done.stdout == (
        f"Installed the asyncagents plugin: {plugin}\n"
        "It calls the service at http://127.0.0.1:4097 (start it with `asyncagents serve`)\n"
        f"Pinned @opencode-ai/plugin@1.18.33 in {tmp_path / '.opencode'}: the version given "
        "with --opencode-version\n"
    )
    config = _config(plugin.read_text())
    assert config["tokenFile"] == str(tmp_path / "state" / "asyncagents" / "token")


def _fake_opencode(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def _install_cli(
    tmp_path: Path, fake_npm: Path, *argv: str, path: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": python_path(),
        "PATH": path,
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    env.pop("ASYNCAGENTS_TOKEN_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "asyncagents", "opencode", "install", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd or tmp_path,
    )


def test_the_opencode_version_is_found_and_the_pin_explained(
    tmp_path: Path, fake_npm: Path
) -> None:
    # no opencode anywhere: the tested version, said so
    bare = f"{fake_npm.parent}{os.pathsep}/usr/bin{os.pathsep}/bin"
    project = tmp_path / "p1"
    project.mkdir()
    done = _install_cli(tmp_path, fake_npm, str(project), path=bare)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"Pinned @opencode-ai/plugin@1.18.33 in {project / '.opencode'}: no opencode found on "
        "PATH or under .opencode-bin/, so the version asyncagents was tested with; run again "
        "with --opencode-version X.Y.Z if yours differs"
    )
    # the one scripts/opencode/install.sh puts under the project's .opencode-bin/
    project = tmp_path / "p2"
    local = _fake_opencode(
        project / ".opencode-bin" / "node_modules" / ".bin" / "opencode", "1.19.2"
    )
    done = _install_cli(tmp_path, fake_npm, str(project), path=bare)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"Pinned @opencode-ai/plugin@1.19.2 in {project / '.opencode'}: the version of {local}"
    )
    # opencode on PATH comes first
    on_path = _fake_opencode(tmp_path / "opencode-bin" / "opencode", "1.20.0")
    done = _install_cli(
        tmp_path, fake_npm, str(project), path=f"{on_path.parent}{os.pathsep}{bare}"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"Pinned @opencode-ai/plugin@1.20.0 in {project / '.opencode'}: the version of "
        f"{on_path} (opencode on PATH)"
    )
    assert (
        (tmp_path / "npm.log").read_text().splitlines()[-1].endswith("@opencode-ai/plugin@1.20.0")
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--service", "notaurl"],
            "--service 'notaurl' is not an http(s) URL with a host",
        ),
        (
            ["--service", "ftp://127.0.0.1:4097"],
            "--service 'ftp://127.0.0.1:4097' is not an http(s) URL with a host",
        ),
        (
            ["--opencode-version", "latest"],
            "--opencode-version 'latest' is not a version number like 1.18.33",
        ),
    ],
)
def test_a_bad_service_url_or_version_is_refused(
    tmp_path: Path, fake_npm: Path, argv: list[str], message: str
) -> None:
    done = _install_cli(tmp_path, fake_npm, str(tmp_path), *argv, path=os.environ["PATH"])
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"asyncagents opencode install: {message}\n"
    assert not (tmp_path / ".opencode").exists()
    assert not (tmp_path / "npm.log").exists()
