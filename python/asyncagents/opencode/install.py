"""`asyncagents opencode install`: the OpenCode plugin and what it needs, in a project.

The plugin (``plugin.js``, shipped in the wheel) goes to ``DIR/.opencode/plugins/asyncagents.js``
with its settings filled in: the service URL, the token file (read at every call, so a service
restarted with a new token needs no reinstall), the tools' descriptions and JSON Schemas (from
`asyncagents.tasks.TOOLS`, so the model sees exactly what the service validates).

The plugin imports ``@opencode-ai/plugin`` (for ``tool.schema``, zod: only zod schemas reach the
model with their types and optionality). OpenCode installs that package into ``.opencode/`` with
npm at its first start unless ``.opencode/node_modules`` exists and ``.opencode/package-lock.json``
lists it; offline that install fails and the plugin is skipped silently. So the installer runs
``npm install`` of the exact version of the user's OpenCode itself (npm ships with the Node.js
that OpenCode's own npm package needs): afterwards OpenCode downloads nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..tasks.tool_names import DEFAULT_OUTPUT_TIMEOUT_SECONDS
from ..tasks.tools import TOOLS

#: the OpenCode version the plugin was checked against; the default pin when none is found
OPENCODE_VERSION = "1.18.33"
PLUGIN_PACKAGE = "@opencode-ai/plugin"
PLUGIN_FILE = "asyncagents.js"
#: how long the plugin waits for the service (a blocking output adds its own timeout)
CALL_TIMEOUT_MS = 30_000
#: the largest answer the plugin reads from the service
MAX_ANSWER_BYTES = 4 * 1024 * 1024
NPM_TIMEOUT_SECONDS = 600.0

_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?")
_CONFIG_SLOT = re.compile(r"/\* asyncagents-config \*/ .*? /\* end \*/", re.S)


class InstallError(Exception):
    """The plugin or its dependency cannot be installed; the message says why and what to do."""


@dataclass(frozen=True)
class Installed:
    """What `install_plugin` did."""

    plugin_path: Path
    opencode_version: str
    #: False when the pinned package was already in place
    ran_npm: bool
    #: why `opencode_version` was pinned, in words (which OpenCode it was read from)
    version_source: str = "the version asked for"


def service_url_problem(url: str) -> str | None:
    """What is wrong with `url` as an http(s) server address, or None."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"{url!r} is not a URL: {exc}"
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return f"{url!r} is not an http(s) URL with a host"
    return None


def plugin_source(service_url: str, token_file: Path) -> str:
    """The plugin's JavaScript with its settings filled in."""
    config = {
        "serviceUrl": service_url.rstrip("/"),
        "tokenFile": str(token_file),
        "timeoutMs": CALL_TIMEOUT_MS,
        "defaultOutputTimeout": DEFAULT_OUTPUT_TIMEOUT_SECONDS,
        "maxAnswerBytes": MAX_ANSWER_BYTES,
        "tools": [t.model_dump() for t in TOOLS],
    }
    template = (resources.files("asyncagents") / "opencode" / "plugin.js").read_text("utf-8")
    literal = json.dumps(config, indent=2, ensure_ascii=True)
    source, count = _CONFIG_SLOT.subn(lambda _: literal, template, count=1)
    if count != 1:  # pragma: no cover (the shipped template has the slot)
        raise InstallError("the packaged plugin.js has no settings slot")
    return source


def detect_opencode_version(binary: str | None = None) -> str | None:
    """The version of `binary` (default: ``opencode`` on PATH), or None when there is none."""
    found = binary or shutil.which("opencode")
    if not found:
        return None
    try:
        done = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\b(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)\b", done.stdout)
    return match.group(1) if match else None


def find_opencode_version(project: Path, asked: str | None = None) -> tuple[str, str]:
    """The OpenCode version to pin the plugin package to, and why, in words.

    In order: `asked` (``--opencode-version``), ``opencode`` on PATH, the one that
    ``scripts/opencode/install.sh`` puts under ``.opencode-bin/`` (in `project`, then in the
    current directory), else `OPENCODE_VERSION`, the version the plugin was tested with.
    Raises `InstallError` for an `asked` that is not a version number.
    """
    if asked is not None:
        if not _VERSION.fullmatch(asked):
            raise InstallError(
                f"--opencode-version {asked!r} is not a version number like {OPENCODE_VERSION}"
            )
        return asked, "the version given with --opencode-version"
    on_path = shutil.which("opencode")
    if on_path:
        found = detect_opencode_version(on_path)
        if found:
            return found, f"the version of {on_path} (opencode on PATH)"
    for base in dict.fromkeys((project, Path.cwd())):
        binary = base / ".opencode-bin" / "node_modules" / ".bin" / "opencode"
        if binary.exists():
            found = detect_opencode_version(str(binary))
            if found:
                return found, f"the version of {binary}"
    return OPENCODE_VERSION, (
        "no opencode found on PATH or under .opencode-bin/, so the version asyncagents was "
        "tested with; run again with --opencode-version X.Y.Z if yours differs"
    )


def _installed_version(config_dir: Path) -> str | None:
    """The version of the plugin package in `config_dir`, if OpenCode would accept it as is."""
    try:
        package = json.loads(
            (config_dir / "node_modules" / PLUGIN_PACKAGE / "package.json").read_text("utf-8")
        )
        lock = json.loads((config_dir / "package-lock.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    root = (lock.get("packages") or {}).get("") or {}
    if PLUGIN_PACKAGE not in (root.get("dependencies") or {}):
        return None
    version = package.get("version")
    return version if isinstance(version, str) else None


def _npm_install(config_dir: Path, version: str, npm: str) -> None:
    spec = f"{PLUGIN_PACKAGE}@{version}"
    command = [
        npm,
        "install",
        "--prefix",
        str(config_dir),
        "--save-exact",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--omit=peer",
        spec,
    ]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_SECONDS,
            check=False,
            cwd=config_dir,
        )
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"`npm install {spec}` in {config_dir} took over {NPM_TIMEOUT_SECONDS:.0f} s"
        ) from None
    except OSError as exc:
        raise InstallError(f"cannot run {npm}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-1500:]
        raise InstallError(f"`npm install {spec}` in {config_dir} failed:\n{tail}")


def install_plugin(
    project: Path,
    service_url: str,
    token_file: Path,
    *,
    opencode_version: str | None = None,
    npm: str | None = None,
) -> Installed:
    """Write the plugin into ``project/.opencode/plugins/`` and put its package in place.

    `opencode_version` pins ``@opencode-ai/plugin`` (default: as `find_opencode_version`
    finds it). Raises `InstallError`, also for a `service_url` that is not an http(s) URL.
    """
    problem = service_url_problem(service_url)
    if problem is not None:
        raise InstallError(f"--service {problem}")
    if not project.is_dir():
        raise InstallError(f"{project} is not a directory")
    version, why = find_opencode_version(project, opencode_version)
    config_dir = project / ".opencode"
    plugins = config_dir / "plugins"
    try:
        plugins.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InstallError(f"cannot create {plugins}: {exc}") from exc
    ran_npm = False
    if _installed_version(config_dir) != version:
        npm = npm or shutil.which("npm")
        if npm is None:
            raise InstallError(
                f"npm is not on PATH: it is needed once to install {PLUGIN_PACKAGE}@{version} "
                f"into {config_dir} (OpenCode would otherwise try to download it at its first "
                "start, and skip the plugin when that fails). Install Node.js with npm, then run "
                "this again."
            )
        _npm_install(config_dir, version, npm)
        ran_npm = True
        if _installed_version(config_dir) != version:
            raise InstallError(
                f"npm ran, but {config_dir} does not hold {PLUGIN_PACKAGE}@{version} with a "
                "package-lock.json listing it"
            )
    target = plugins / PLUGIN_FILE
    source = plugin_source(service_url, token_file)
    try:
        tmp = target.with_suffix(".js.tmp")
        tmp.write_text(source, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        raise InstallError(f"cannot write {target}: {exc}") from exc
    return Installed(
        plugin_path=target, opencode_version=version, ran_npm=ran_npm, version_source=why
    )
