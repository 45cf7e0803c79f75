"""``asyncagents serve`` as a process: token file, health, auth, graceful stop, restart."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asyncagents.tasks import TaskManagerConfig
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

    # the OpenCode server is down: a launch is accepted and ends in error (its session cannot
    # be created), the next one answers the error at once, and the service stays up
    def tool(name: str, arguments: dict[str, object]) -> str:
        return str(
            httpx.post(
                f"{service.url}/v1/tools/{name}",
                json={"session_id": "ses_parent", "arguments": arguments},
                headers={"authorization": f"Bearer {token}"},
                timeout=60,
            ).json()["text"]
        )

    started = tool("asyncagents_task", {"prompt": "x", "agent": "build"})
    assert started.startswith("Background task started: `tsk_"), started
    task_id = started.split("`")[1]
    ended = tool("asyncagents_output", {"task_id": task_id, "block": True, "timeout": 30})
    assert ended.startswith(f"Task `{task_id}` [error] build: x\n"), ended
    text = tool("asyncagents_task", {"prompt": "x", "agent": "build"})
    assert text.startswith("Error: OpenCode server at "), text
    status, out = service.stop()
    assert status == 0, out
    assert f"asyncagents serve: token created in {service.token_path}\n" in out
    # not a terminal (a pipe, a log): the dashboard's address without the token
    assert (
        f"asyncagents serve: ready on http://127.0.0.1:{service.port}\n"
        f"asyncagents serve: dashboard at http://127.0.0.1:{service.port}/\n"
    ) in out
    assert token not in out
    assert out.endswith("asyncagents serve: stopped\n"), out


#: `asyncagents serve` whose heap freeze says what it froze, then stops the service
_FREEZE_PROBE = """
import gc, os, signal, sys
from asyncagents.cli import main
from asyncagents.service import server

freeze = server.freeze_startup_heap

def probe():
    before = len(gc.get_objects())
    freeze()
    print("heap", before, gc.get_freeze_count(), len(gc.get_objects()), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

server.freeze_startup_heap = probe
sys.exit(main(sys.argv[1:]))
"""


def test_what_start_up_made_is_frozen_out_of_full_collections(service: Service) -> None:
    """Once started, the service freezes its heap (gc.freeze): a full collection then walks
    only what came after, not the ~50,000 objects of the loaded service, a pause of tens of
    milliseconds in whatever call it lands (the p99 of ``task()``)."""
    argv = service.argv("tasks.sqlite3")
    run = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE, *argv[3:]],
        env=service.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.endswith("asyncagents serve: stopped\n"), run.stdout
    line = next(x for x in run.stdout.splitlines() if x.startswith("heap "))
    tracked, frozen, left = map(int, line.split()[1:])
    # the service, its app and its manager were loaded and started before the freeze
    assert tracked > 20_000, line
    assert frozen >= tracked - 1_000, line
    assert left < 1_000, line


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
    from_env = subprocess.run(
        [sys.executable, "-m", "asyncagents", "serve"],
        env={**env, "ASYNCAGENTS_OPENCODE": "notaurl"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (from_env.returncode, from_env.stderr) == (
        2,
        "asyncagents serve: ASYNCAGENTS_OPENCODE 'notaurl' is not an http(s) URL with a host\n",
    )
    service.start()
    status, out = service.stop()
    assert status == 0
    assert (
        f"asyncagents serve: warning: OpenCode at {NO_OPENCODE} does not answer yet (ConnectError)"
        "; tool calls fail until it does\n" in out
    )


def test_an_interactive_terminal_gets_the_dashboard_link_with_the_token(
    service: Service,
) -> None:
    import pty
    import select

    main_fd, terminal = pty.openpty()
    service.process = subprocess.Popen(
        service.argv("tasks.sqlite3"),
        env=service.env(),
        stdout=terminal,
        stderr=subprocess.DEVNULL,
    )
    os.close(terminal)
    seen = b""
    end = time.monotonic() + 60
    try:
        while b"dashboard at" not in seen or not seen.endswith(b"\n"):
            assert time.monotonic() < end, seen
            ready, _, _ = select.select([main_fd], [], [], 1)
            if ready:
                seen += os.read(main_fd, 4096)
        token = service.token_path.read_text().strip()
        assert (
            f"asyncagents serve: dashboard at http://127.0.0.1:{service.port}/#token={token}\r\n"
        ) in seen.decode()
        service.process.send_signal(signal.SIGTERM)
        assert service.process.wait(timeout=60) == 0
    finally:
        os.close(main_fd)


def test_addresses_are_printed_as_urls() -> None:
    from asyncagents.service.server import base_url

    assert base_url("127.0.0.1", 4097) == "http://127.0.0.1:4097"
    assert base_url("::1", 4097) == "http://[::1]:4097"
    assert base_url("localhost", 80) == "http://localhost:80"


def _run(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncagents", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_settings_exit_2_naming_the_setting_and_its_source(
    service: Service, tmp_path: Path
) -> None:
    env = service.env()
    config = tmp_path / "serve.toml"
    config.write_text('opencode = "http://127.0.0.1:9"\nlease_ttl = 0\n')
    done = _run(
        "serve", "--config", str(config), "--poll-interval", "soon", "--wake", "never",
        env={**env, "ASYNCAGENTS_PORT": "70000"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "asyncagents serve: ASYNCAGENTS_PORT: Input should be less than or equal to 65535 "
        "(got '70000')\n"
        "asyncagents serve: --poll-interval: Input should be a valid number, unable to parse "
        "string as a number (got 'soon')\n"
        f"asyncagents serve: lease_ttl in {config}: Input should be greater than 0 (got 0)\n"
    )
    missing = _run("serve", env=env)
    assert (missing.returncode, missing.stderr) == (
        2,
        "asyncagents serve: --opencode is required (or ASYNCAGENTS_OPENCODE, or opencode in "
        "the config file)\n",
    )
    config.write_text("pol_interval = 3\n")
    unknown = _run("serve", "--config", str(config), env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith(
        f"asyncagents serve: the config file {config} has unknown settings: pol_interval (known: "
    )
    known = unknown.stderr.rstrip(")\n").split("(known: ")[1].split(", ")
    assert known == sorted(known) and "poll_interval" in known and "opencode" in known
    config.write_text("poll_interval = \n")
    broken = _run("serve", "--config", str(config), env=env)
    assert broken.returncode == 2
    assert broken.stderr.startswith(
        f"asyncagents serve: the config file {config} is not valid TOML: "
    )
    gone = _run("serve", "--config", str(tmp_path / "nope.toml"), env=env)
    assert (gone.returncode, gone.stderr) == (
        2,
        f"asyncagents serve: cannot read the config file {tmp_path / 'nope.toml'}: "
        "No such file or directory\n",
    )
    pairs = _run("serve", "--opencode", NO_OPENCODE, "--model", "gpt", env=env)
    assert (pairs.returncode, pairs.stderr) == (
        2,
        "asyncagents serve: --model: 'gpt' is not KEY=VALUE\n",
    )


def _resolve(argv: list[str], env: dict[str, str]) -> Any:
    from asyncagents.cli import _parser
    from asyncagents.service.settings import resolve

    return resolve(_parser().parse_args(["serve", *argv]), env)


def test_an_option_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(
        'opencode = "http://127.0.0.1:4096"\n'
        "port = 5000\n"
        "poll_interval = 2.5\n"
        "lease_ttl = 12\n"
        'wake = "all_done"\n'
        "follow_events = false\n"
        'model = { providerID = "local", modelID = "from-file" }\n'
    )
    env = {"ASYNCAGENTS_POLL_INTERVAL": "7", "ASYNCAGENTS_WAKE": "never", "ASYNCAGENTS_HOST": ""}
    settings = _resolve(
        ["--config", str(config), "--wake", "each", "--model", "providerID=local",
         "--model", "modelID=from-option"],
        env,
    )  # fmt: skip
    assert settings.serve.model_dump() == {
        "opencode": "http://127.0.0.1:4096",
        "host": "127.0.0.1",  # an empty variable counts as unset
        "port": 5000,
        "allowed_host": (),
        "opencode_username": None,
        "opencode_password_file": None,
        "store": None,
    }
    manager = settings.manager
    assert (manager.poll_interval, manager.lease_ttl, manager.wake) == (7.0, 12.0, "each")
    assert manager.follow_events is False
    assert manager.model == {"providerID": "local", "modelID": "from-option"}
    # the rest are the model's defaults
    assert manager.stall_timeout == TaskManagerConfig().stall_timeout
    # a mapping from the environment: KEY=VALUE pairs, or a JSON object
    for text in ("providerID=p,modelID=m", '{"providerID": "p", "modelID": "m"}'):
        got = _resolve(["--opencode", NO_OPENCODE], {"ASYNCAGENTS_MODEL": text})
        assert got.manager.model == {"providerID": "p", "modelID": "m"}
    flags = _resolve(
        ["--opencode", NO_OPENCODE, "--no-notify-parent", "--delete-cleared-sessions"],
        {"ASYNCAGENTS_NOTIFY_PARENT": "true", "ASYNCAGENTS_FOLLOW_EVENTS": "off"},
    )
    assert flags.manager.notify_parent is False
    assert flags.manager.delete_cleared_sessions is True
    assert flags.manager.follow_events is False


def test_every_manager_field_is_an_option_with_its_description() -> None:
    from asyncagents.cli import _parser
    from asyncagents.service.settings import ServeSettings, settings, settings_table

    names = [s.name for s in settings()]
    assert names == [*ServeSettings.model_fields, *TaskManagerConfig.model_fields]
    serve = next(
        action.choices["serve"]
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    options = {o: a for a in serve._actions for o in a.option_strings}
    table = settings_table()
    for name, info in TaskManagerConfig.model_fields.items():
        assert info.description, f"TaskManagerConfig.{name} needs a description (its help)"
        option = "--" + name.replace("_", "-")
        assert option in options, option
        assert options[option].help is not None
        assert options[option].help.startswith(info.description.split(" (default")[0])
        assert f"| `{name}`<br>`{option}" in table
        assert f"`<br>`ASYNCAGENTS_{name.upper()}` | " in table
    assert "--config" in options


def test_a_new_field_is_an_option_at_once_and_a_mapping_of_counts_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field added to TaskManagerConfig (here in a subclass) needs no code in the CLI."""
    from asyncagents.service import settings as settings_module
    from pydantic import Field

    class Config(TaskManagerConfig):
        max_running_per_agent: dict[str, int] = Field(
            default_factory=dict, description="most tasks running at once per agent"
        )
        max_cost: float | None = Field(default=None, gt=0, description="most dollars a task spends")

    monkeypatch.setattr(settings_module, "MODELS", (settings_module.ServeSettings, Config))
    from asyncagents.cli import _parser

    serve = next(
        action.choices["serve"]
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    help_text = serve.format_help()
    assert "--max-running-per-agent KEY=N" in help_text
    assert "--max-cost NUMBER" in help_text
    got = _resolve(
        ["--opencode", NO_OPENCODE, "--max-running-per-agent", "build=2",
         "--max-running-per-agent", "plan=1"],
        {"ASYNCAGENTS_MAX_COST": "0.5"},
    )  # fmt: skip
    assert isinstance(got.manager, Config)
    assert got.manager.max_running_per_agent == {"build": 2, "plan": 1}
    assert got.manager.max_cost == 0.5
    assert _resolve(["--opencode", NO_OPENCODE], {}).manager.max_running_per_agent == {}
    from asyncagents.service.settings import SettingsError

    with pytest.raises(SettingsError) as info:
        _resolve(["--opencode", NO_OPENCODE, "--max-running-per-agent", "build=two"], {})
    assert str(info.value) == (
        "--max-running-per-agent [build]: Input should be a valid integer, unable to parse "
        "string as an integer (got 'two')"
    )
    table = settings_module.settings_table()
    assert (
        "| `max_running_per_agent`<br>`--max-running-per-agent KEY=N`<br>"
        "`ASYNCAGENTS_MAX_RUNNING_PER_AGENT` | none | most tasks running at once per agent |"
    ) in table


async def test_the_settings_reach_the_manager_and_the_store(tmp_path: Path) -> None:
    from asyncagents.service.server import build_manager
    from asyncagents.tasks import SQLiteTaskStore
    from asyncagents.tasks.store.postgres import PostgresTaskStore

    settings = _resolve(
        ["--opencode", NO_OPENCODE, "--store", str(tmp_path / "t.sqlite3"), "--wake", "never",
         "--lease-ttl", "9"],
        {},
    )  # fmt: skip
    manager = build_manager(settings)
    try:
        assert (manager.config.wake, manager.config.lease_ttl) == ("never", 9.0)
        assert manager.backend_name == NO_OPENCODE
        assert isinstance(manager.store, SQLiteTaskStore)
        assert manager.store.path == tmp_path / "t.sqlite3"
    finally:
        await manager.aclose()
    for dsn in ("postgresql://agent@127.0.0.1:1/tasks", "postgres://agent@127.0.0.1:1/tasks"):
        pg = build_manager(_resolve(["--opencode", NO_OPENCODE, "--store", dsn], {}))
        try:
            assert isinstance(pg.store, PostgresTaskStore) and pg.store.dsn == dsn
        finally:
            await pg.aclose()


@pytest.fixture(scope="module")
def password_postgres() -> Iterator[tuple[Any, str]]:
    """A real PostgreSQL whose role ``agent`` must give its password (scram-sha-256), and
    a database ``tasks`` it owns; yields the server and the password."""
    import psycopg
    from pg_server import running_postgres

    password = "s3cret-pw"
    with running_postgres() as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE agent LOGIN PASSWORD '{password}'")
            conn.execute("CREATE DATABASE tasks OWNER agent")
            hba = server.data_dir / "pg_hba.conf"
            hba.write_text(
                "host all agent 127.0.0.1/32 scram-sha-256\n" + hba.read_text(encoding="utf-8")
            )
            conn.execute("SELECT pg_reload_conf()")
        yield server, password


def test_store_takes_a_postgres_dsn_with_the_password_from_the_environment_or_pgpass(
    service: Service, tmp_path: Path, password_postgres: tuple[Any, str]
) -> None:
    import psycopg

    server, password = password_postgres
    dsn = f"postgresql://agent@127.0.0.1:{server.port}/tasks"
    argv = [
        sys.executable, "-m", "asyncagents", "serve", "--opencode", NO_OPENCODE,
        "--port", str(service.port), "--store", dsn,
    ]  # fmt: skip

    def serve_once(env: dict[str, str]) -> str:
        service.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        end = time.monotonic() + 60
        while True:
            assert service.process.poll() is None, service.process.communicate()[0]
            assert time.monotonic() < end
            try:
                if httpx.get(f"{service.url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        token = service.token_path.read_text().strip()
        assert _call(service, token).json() == {"text": "No background tasks found"}
        status, out = service.stop()
        assert status == 0, out
        return out

    env = {**service.env(), "PGPASSWORD": password}
    env.pop("PGPASSFILE", None)
    out = serve_once(env)
    assert password not in out
    with psycopg.connect(
        f"host=127.0.0.1 port={server.port} user=agent dbname=tasks password={password}"
    ) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'asyncagents'"
        ).fetchone()
        assert found is not None and found[0] >= 1
    # ~/.pgpass instead of the environment
    home = tmp_path / "home"
    home.mkdir()
    pgpass = home / ".pgpass"
    pgpass.write_text(f"127.0.0.1:{server.port}:tasks:agent:{password}\n")
    pgpass.chmod(0o600)
    env = {**service.env(), "HOME": str(home)}
    env.pop("PGPASSWORD", None)
    env.pop("PGPASSFILE", None)
    serve_once(env)
    # a password in the DSN works, with a warning that the process list shows it
    service.process = None
    with_password = f"postgresql://agent:{password}@127.0.0.1:{server.port}/tasks"
    warned = _run(
        "serve", "--opencode", "notaurl", "--store", with_password, env=service.env()
    )  # the bad --opencode stops it before it starts, after the warning
    assert warned.returncode == 2
    assert warned.stderr == (
        "asyncagents serve: warning: the --store DSN holds a password, which other users can "
        "read in the process list; put it in PGPASSWORD or ~/.pgpass instead\n"
        "asyncagents serve: --opencode 'notaurl' is not an http(s) URL with a host\n"
    )
    # no password anywhere: the service does not start, and says why
    env = {**service.env(), "HOME": str(tmp_path / "nohome")}
    env.pop("PGPASSWORD", None)
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused
    assert refused.stderr.endswith(
        "asyncagents serve: cannot open the task store: PostgreSQL task store "
        f"'user=agent dbname=tasks host=127.0.0.1 port={server.port}' (schema asyncagents): "
        f'connecting failed: connection failed: connection to server at "127.0.0.1", port '
        f"{server.port} failed: fe_sendauth: no password supplied\n"
    ), refused.stderr
    assert "Traceback" not in refused.stderr


def test_serve_answers_only_its_own_host_names(service: Service) -> None:
    service.start("--allowed-host", "agents.internal")
    token = service.token_path.read_text().strip()
    auth = {"authorization": f"Bearer {token}"}
    port = service.port
    for host in ("rebind.example", f"rebind.example:{port}", f"127.0.0.1:{port + 1}"):
        for path in ("/", "/v1/health", "/v1/tasks"):
            response = httpx.get(f"{service.url}{path}", headers={"host": host, **auth}, timeout=30)
            assert response.status_code == 421, (host, path)
            assert response.json()["error"] == "misdirected_request"
            assert response.headers["x-content-type-options"] == "nosniff"
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "agents.internal", "localhost"):
        response = httpx.get(f"{service.url}/v1/health", headers={"host": host}, timeout=30)
        assert response.status_code == 200, host
        assert response.headers["x-content-type-options"] == "nosniff"
    status, out = service.stop()
    assert status == 0, out
    assert "not loopback" not in out


def test_any_loopback_address_binds_without_a_warning(service: Service) -> None:
    service.url = f"http://127.0.0.2:{service.port}"
    service.start("--host", "127.0.0.2")
    response = httpx.get(f"{service.url}/v1/health", timeout=30)
    assert response.status_code == 200
    status, out = service.stop()
    assert status == 0, out
    assert "not loopback" not in out
    assert f"asyncagents serve: ready on http://127.0.0.2:{service.port}\n" in out


def test_a_name_other_than_localhost_is_warned_about(service: Service) -> None:
    done = subprocess.run(
        [*service.argv("t.sqlite3"), "--host", "no-such-host.invalid"],
        env=service.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1  # it cannot bind there
    assert (
        "\nasyncagents serve: listening on no-such-host.invalid, not loopback: anyone who can "
        "reach it and has the token can start tasks.\n" in done.stderr
    )


def test_allowed_hosts_from_options_the_environment_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('allowed_host = ["from.file"]\n')
    base = ["--opencode", NO_OPENCODE, "--config", str(config)]
    assert _resolve(base, {}).serve.allowed_host == ("from.file",)
    env = {"ASYNCAGENTS_ALLOWED_HOST": "a.internal, b.internal:8080"}
    assert _resolve(base, env).serve.allowed_host == ("a.internal", "b.internal:8080")
    given = [*base, "--allowed-host", "x", "--allowed-host", "y"]
    assert _resolve(given, env).serve.allowed_host == ("x", "y")


def test_the_guards_are_settings_and_off_switches_one_off(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('opencode = "http://127.0.0.1:9"\nmax_cost = "off"\n')
    manager = _resolve(
        [
            "--config", str(config), "--max-runtime", "90", "--idle-timeout", "3",
            "--max-tool-calls", "7", "--notice-result-chars", "500",
        ],
        {"ASYNCAGENTS_MAX_TOKENS": "OFF"},
    ).manager  # fmt: skip
    assert (manager.max_runtime, manager.idle_timeout, manager.max_tool_calls) == (90.0, 3.0, 7)
    assert (manager.max_cost, manager.max_tokens, manager.notice_result_chars) == (None, None, 500)
    defaults = _resolve(["--opencode", NO_OPENCODE], {}).manager
    assert (defaults.max_runtime, defaults.idle_timeout, defaults.max_tool_calls) == (
        1800.0,
        300.0,
        200,
    )
    assert (defaults.max_cost, defaults.max_tokens, defaults.notice_result_chars) == (
        10.0,
        10_000_000,
        4000,
    )


def test_a_bad_guard_setting_exits_2_naming_it(service: Service) -> None:
    done = _run(
        "serve", "--opencode", NO_OPENCODE, "--max-runtime", "-3", "--max-tool-calls", "2.5",
        "--notice-result-chars", "off",
        env=service.env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "asyncagents serve: --max-runtime: Input should be greater than 0 (got '-3')\n"
        "asyncagents serve: --max-tool-calls: Input should be a valid integer, unable to parse "
        "string as an integer (got '2.5')\n"
        "asyncagents serve: --notice-result-chars: Input should be a valid integer, unable to "
        "parse string as an integer (got 'off')\n"
    )
    assert not service.token_path.exists()  # refused before the token file was made
