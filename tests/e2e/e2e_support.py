"""End-to-end support: a real ``opencode serve`` on 127.0.0.1, the fake model as provider.

The binary comes from ``$ASYNCAGENTS_OPENCODE_BIN``, else ``<repo>/.opencode-bin`` (what
scripts/opencode/install.sh installs), else ``opencode`` on PATH. When none exists the tests
FAIL (CI installs it; a skipped end-to-end suite would hide a broken setup).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import polling
import pytest
from asyncagents.tasks import OpenCodeBackend, PromptRequest, TaskManagerConfig
from fake_model import FakeModel
from parent_notices import notices_in

REPO = Path(__file__).resolve().parents[2]
LOCAL_BIN = REPO / ".opencode-bin" / "node_modules" / ".bin" / "opencode"
INSTALL_SCRIPT = REPO / "scripts" / "opencode" / "install.sh"
STARTUP_TIMEOUT = 60.0

#: OpenCode's default agent
AGENT = "build"
#: the fake model's price (USD per million tokens), as OpenCode's config takes it
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
#: a second model of the fake provider, with a 16k-token context window
SMALL_MODEL_ID = "fake-small"
SMALL_MODEL = f"fake/{SMALL_MODEL_ID}"

_NO_REGISTRY = "http://127.0.0.1:9/"
_OFFLINE_FLAGS = (
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_SHARE",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    "OPENCODE_DISABLE_CLAUDE_CODE",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS",
    "OPENCODE_PURE",
)


def opencode_binary() -> str:
    """The opencode executable to run: `$ASYNCAGENTS_OPENCODE_BIN`, else the pinned version in
    `<repo>/.opencode-bin` (installed from npm by `INSTALL_SCRIPT` on first use), else `opencode`
    on PATH; with none of them, a test failure saying how to install one."""
    env = os.environ.get("ASYNCAGENTS_OPENCODE_BIN")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"ASYNCAGENTS_OPENCODE_BIN={env!r} is not an executable file.")
        return env
    if os.access(LOCAL_BIN, os.X_OK):
        return str(LOCAL_BIN)
    install_error = "npm is not on PATH"
    if shutil.which("npm"):
        prefix = LOCAL_BIN.parents[2]  # <prefix>/node_modules/.bin/opencode
        done = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            env={**os.environ, "ASYNCAGENTS_OPENCODE_PREFIX": str(prefix)},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode == 0 and os.access(LOCAL_BIN, os.X_OK):
            return str(LOCAL_BIN)
        install_error = (done.stdout + done.stderr)[-1500:]
    found = shutil.which("opencode")
    if found:
        return found
    pytest.fail(
        "No opencode binary for the end-to-end tests, and installing it failed "
        f"({install_error}). Run scripts/opencode/install.sh (it installs {LOCAL_BIN}), put "
        "`opencode` on PATH, or set ASYNCAGENTS_OPENCODE_BIN."
    )


def manager_config(**settings: Any) -> TaskManagerConfig:
    """The e2e tests' manager config: notices as ``noReply`` messages (``wake="never"``), so
    the fake model is not prompted by them, unless a test sets `wake`."""
    return TaskManagerConfig.model_validate({"wake": "never", **settings})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class OpenCodeServer:
    """One ``opencode serve`` process with its own project dir and home."""

    def __init__(self, binary: str, model_url: str, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.project = root / "project"
        self.home = root / "home"
        self.log_path = root / "opencode.log"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model_url = model_url
        self.process: subprocess.Popen[bytes] | None = None
        #: ``OPENCODE_SERVER_PASSWORD`` of the server (basic auth on every route), if any
        self.password: str | None = None

    def config(self) -> dict[str, Any]:
        return {
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Fake",
                    "options": {"baseURL": self.model_url, "apiKey": "fake"},
                    "models": {
                        "fake-model": {
                            "name": "Fake",
                            "limit": {"context": 200000, "output": 8192},
                            "tool_call": True,
                            # USD per million tokens: OpenCode prices every step with it
                            "cost": PRICE,
                        },
                        # a small context window: a fork to it gets a budget that fits
                        SMALL_MODEL_ID: {
                            "name": "Fake small",
                            "limit": {"context": 16000, "output": 4096},
                            "tool_call": True,
                        },
                    },
                }
            },
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "enabled_providers": ["fake"],
            "permission": {"*": "allow"},
            "lsp": False,
            "formatter": False,
            "autoupdate": False,
            "share": "disabled",
        }

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCODE")}
        env.update(
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_STATE_HOME=str(self.home / ".local" / "state"),
        )
        env.update(dict.fromkeys(_OFFLINE_FLAGS, "1"))
        # OpenCode installs @opencode-ai/plugin into its config dirs with npm at startup; point
        # npm at a closed local port so nothing leaves 127.0.0.1 (the install fails at once
        # instead of holding the process open at shutdown)
        env.update(npm_config_registry=_NO_REGISTRY, npm_config_offline="true")
        if self.password:
            env["OPENCODE_SERVER_PASSWORD"] = self.password
        return env

    def start(self) -> OpenCodeServer:
        self.project.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / ".npmrc").write_text(f"registry={_NO_REGISTRY}\noffline=true\n")
        (self.project / "opencode.json").write_text(json.dumps(self.config(), indent=2))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [self.binary, "serve", "--hostname", "127.0.0.1", "--port", str(self.port)],
                cwd=self.project,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_healthy()
        return self

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _wait_healthy(self) -> None:
        assert self.process is not None
        end = time.monotonic() + STARTUP_TIMEOUT
        last = "no answer yet"
        while time.monotonic() < end:
            if self.process.poll() is not None:
                pytest.fail(
                    f"opencode serve exited with {self.process.returncode} before it was "
                    f"healthy; log:\n{self.log_tail()}"
                )
            try:
                auth = ("opencode", self.password) if self.password else None
                response = httpx.get(f"{self.base_url}/global/health", timeout=2, auth=auth)
                if response.status_code == 200 and response.json().get("healthy") is True:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        self.stop()
        pytest.fail(
            f"opencode serve at {self.base_url} not healthy after {STARTUP_TIMEOUT:.0f}s "
            f"({last}); log:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def running_server(model: FakeModel, root: Path) -> Iterator[OpenCodeServer]:
    server = OpenCodeServer(opencode_binary(), model.base_url, root)
    try:
        yield server.start()
    finally:
        server.stop()


# --- helpers ---------------------------------------------------------------------------------


async def until(
    cond: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0, what: str = "condition"
) -> None:
    """`polling.until` with the end-to-end margins: a real server on a loaded 2-core machine."""
    await polling.until(cond, timeout, what, every=0.05)


async def say(backend: OpenCodeBackend, session_id: str, text: str) -> dict[str, Any]:
    """A synchronous prompt in a session (the turn runs to its end)."""
    return await backend.prompt(session_id, PromptRequest(text=text, agent=AGENT))


def model_got(fake_model: FakeModel, prompt: str) -> bool:
    """The fake model has received a request whose last user message holds `prompt`."""
    for request in list(fake_model.requests):
        users = [m for m in request.get("messages") or () if m.get("role") == "user"]
        if users and prompt in str(users[-1].get("content")):
            return True
    return False


async def has_notices(backend: OpenCodeBackend, session_id: str, n: int) -> bool:
    """The parent has received at least `n` notices."""
    return len(await notices_in(backend, session_id)) >= n
