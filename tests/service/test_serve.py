"""``asyncagents serve`` as a process: token file, health, auth, graceful stop, restart."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from subprocess_env import python_path

REPO = Path(__file__).resolve().parents[2]
#: nothing listens there: the service starts without its OpenCode server (it reconnects)
NO_OPENCODE = "http://127.0.0.1:9"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Service:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_path = root / "state" / "asyncagents" / "token"
        self.process: subprocess.Popen[str] | None = None

    def env(self) -> dict[str, str]:
        """The environment of a service process: its state under `root`, no token file set."""
        env = {
            **os.environ,
            "PYTHONPATH": python_path(),
            "XDG_STATE_HOME": str(self.root / "state"),
        }
        env.pop("ASYNCAGENTS_TOKEN_FILE", None)
        return env

    def argv(self, store: str, *extra: str) -> list[str]:
        """`asyncagents serve` on this service's port with the store file `root/store`."""
        return [
            sys.executable, "-m", "asyncagents", "serve", "--opencode", NO_OPENCODE,
            "--port", str(self.port), "--store", str(self.root / store), *extra,
        ]  # fmt: skip

    def start(self, *extra: str) -> Service:
        self.process = subprocess.Popen(
            self.argv("tasks.sqlite3", *extra),
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        end = time.monotonic() + 60
        while time.monotonic() < end:
            assert self.process.poll() is None, self.process.communicate()[0]
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.process.kill()
        pytest.fail(f"service not healthy: {self.process.communicate()[0]}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        assert self.process is not None
        self.process.send_signal(sig)
        out, _ = self.process.communicate(timeout=60)
        return self.process.returncode, out

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path)
    yield svc
    svc.kill()


def _call(svc: Service, token: str, name: str = "asyncagents_list") -> httpx.Response:
    return httpx.post(
        f"{svc.url}/v1/tools/{name}",
        json={"session_id": "ses_parent", "agent": "build", "arguments": {}},
        headers={"authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_first_start_creates_a_private_token_then_serves(service: Service) -> None:
    service.start()
    info = service.token_path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(service.token_path.parent.stat().st_mode) == 0o700
    token = service.token_path.read_text().strip()
    assert len(token) == 64
    assert _call(service, token).json() == {"text": "No background tasks found"}
    assert _call(service, "wrong").status_code == 401
    # the OpenCode server is down: a launch answers a text, the service stays up
    text = httpx.post(
        f"{service.url}/v1/tools/asyncagents_task",
        json={"session_id": "ses_parent", "arguments": {"prompt": "x", "agent": "build"}},
        headers={"authorization": f"Bearer {token}"},
        timeout=60,
    ).json()["text"]
    assert text.startswith("Error: "), text
    status, out = service.stop()
    assert status == 0, out
    assert f"asyncagents serve: token created in {service.token_path}\n" in out
    assert f"asyncagents serve: ready on http://127.0.0.1:{service.port}\n" in out


def test_sigint_stops_it_too_and_the_next_start_reuses_the_token(service: Service) -> None:
    service.start()
    token = service.token_path.read_text().strip()
    status, _ = service.stop(signal.SIGINT)
    assert status == 0
    service.start()
    assert _call(service, token).status_code == 200
    status, out = service.stop()
    assert status == 0
    assert f"asyncagents serve: token read from {service.token_path}\n" in out


def test_a_token_file_others_can_read_is_refused(service: Service) -> None:
    service.token_path.parent.mkdir(parents=True)
    service.token_path.write_text("x" * 64)
    service.token_path.chmod(0o644)
    done = subprocess.run(
        [sys.executable, "-m", "asyncagents", "serve", "--opencode", NO_OPENCODE],
        env=service.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"asyncagents serve: {service.token_path} is readable by other users (mode 0644); run "
        f"`chmod 600 {service.token_path}` or delete it to get a new token\n"
    )


def test_a_port_in_use_fails_with_status_1(service: Service) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", service.port))
        busy.listen()
        done = subprocess.run(
            service.argv("t.sqlite3"),
            env=service.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "address already in use" in done.stderr.lower()


def test_a_bad_opencode_url_is_refused_and_a_down_one_warned(service: Service) -> None:
    env = service.env()
    for url in ("notaurl", "ftp://127.0.0.1:21"):
        done = subprocess.run(
            [sys.executable, "-m", "asyncagents", "serve", "--opencode", url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert done.stderr == (
            f"asyncagents serve: --opencode {url!r} is not an http(s) URL with a host\n"
        )
    service.start()
    status, out = service.stop()
    assert status == 0
    assert (
        f"asyncagents serve: warning: OpenCode at {NO_OPENCODE} does not answer yet (ConnectError)"
        "; tool calls fail until it does\n" in out
    )


@pytest.mark.parametrize("wake", ["each", "all_done", "never"])
async def test_wake_goes_to_the_managers_config(tmp_path: Path, wake: str) -> None:
    from asyncagents.service.server import ServeOptions, build_manager

    options = ServeOptions(
        opencode_url=NO_OPENCODE,
        store_path=tmp_path / "tasks.sqlite3",
        wake=wake,  # type: ignore[arg-type]
    )
    manager = build_manager(options)
    try:
        assert manager.config.wake == wake
        assert manager.backend_name == NO_OPENCODE
    finally:
        await manager.aclose()


def test_limit_options_reach_the_managers_config() -> None:
    from asyncagents.cli import _parser

    args = _parser().parse_args(
        [
            "serve", "--opencode", NO_OPENCODE, "--max-runtime", "90", "--idle-timeout", "3",
            "--max-tool-calls", "7", "--max-cost", "0.5", "--max-tokens", "off",
            "--notice-result-chars", "500",
        ]
    )  # fmt: skip
    assert (args.max_runtime, args.idle_timeout, args.max_tool_calls) == (90.0, 3.0, 7)
    assert (args.max_cost, args.max_tokens, args.notice_result_chars) == (0.5, None, 500)
    assert not hasattr(_parser().parse_args(["serve", "--opencode", NO_OPENCODE]), "max_cost")


async def test_limits_go_to_the_managers_config(tmp_path: Path) -> None:
    from asyncagents.service.server import ServeOptions, build_manager

    options = ServeOptions(
        opencode_url=NO_OPENCODE,
        store_path=tmp_path / "tasks.sqlite3",
        limits={"max_runtime": 90.0, "idle_timeout": 3.0, "max_tokens": None},
    )
    manager = build_manager(options)
    try:
        config = manager.config
        assert (config.max_runtime, config.idle_timeout, config.max_tokens) == (90.0, 3.0, None)
        assert (config.max_tool_calls, config.max_cost, config.notice_result_chars) == (
            200,
            10.0,
            4000,
        )
    finally:
        await manager.aclose()


@pytest.mark.parametrize(
    ("option", "value", "line"),
    [
        ("--max-runtime", "-3", "--max-runtime -3.0: Input should be greater than 0"),
        ("--max-tokens", "0", "--max-tokens 0: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_limit_is_refused_before_anything_starts(
    service: Service, option: str, value: str, line: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "asyncagents", "serve", "--opencode", NO_OPENCODE, option, value],
        env=service.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"asyncagents serve: {line}\n"
    assert not service.token_path.exists()  # refused before the token file was made


def test_a_limit_that_is_not_a_number_is_refused(service: Service) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "asyncagents", "serve", "--opencode", NO_OPENCODE,
         "--max-tool-calls", "2.5"],
        env=service.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.endswith(
        "asyncagents serve: error: argument --max-tool-calls: '2.5' is not a whole number\n"
    )
