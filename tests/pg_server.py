"""A real, throwaway PostgreSQL server for tests: Debian's binaries, a temporary directory.

`running_postgres()` runs ``initdb`` in a new temporary directory, starts ``postgres`` on a free
loopback port (its socket in that directory), waits until it answers, and at the end stops it by
its PID and removes the directory. PostgreSQL refuses to run as root, so as root (CI) both run as
the ``postgres`` user via ``setpriv`` (which execs: the PID we hold is the server's). When the
binaries are missing, ``scripts/postgres/install.sh`` installs Debian's ``postgresql`` package;
if that fails the tests fail with its message (they are never skipped).

Usable from any test directory (``tests/`` is on ``sys.path``) and by hand:
``python tests/pg_server.py`` prints a DSN and serves until Enter is pressed.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "scripts" / "postgres" / "install.sh"
_DB_SEQ = itertools.count(1)


def _version_key(bindir: str) -> tuple[int, ...]:
    version = Path(bindir).parent.name
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<ver>/bin`` with initdb and postgres (or the override)."""
    override = os.environ.get("ASYNCAGENTS_PG_BINDIR")
    candidates = [override] if override else glob.glob("/usr/lib/postgresql/*/bin")
    found = [
        c for c in candidates if (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file()
    ]
    return Path(max(found, key=_version_key)) if found else None


def ensure_bindir() -> Path:
    """The server binaries' directory, installing Debian's package first if they are missing."""
    bindir = find_bindir()
    if bindir is not None:
        return bindir
    if os.environ.get("ASYNCAGENTS_PG_BINDIR"):
        raise RuntimeError(
            f"ASYNCAGENTS_PG_BINDIR={os.environ['ASYNCAGENTS_PG_BINDIR']} holds no initdb and "
            "postgres; unset it to use (or install) Debian's /usr/lib/postgresql/<ver>/bin"
        )
    done = subprocess.run(
        ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False
    )
    bindir = find_bindir()
    if done.returncode != 0 or bindir is None:
        raise RuntimeError(
            "PostgreSQL's server binaries (initdb, postgres) are missing and "
            f"{INSTALL_SCRIPT} could not install them (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return bindir


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, listening on 127.0.0.1:`port`."""

    def __init__(self) -> None:
        self.bindir = ensure_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="asyncagents-pg-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(
                    "running as root, PostgreSQL needs the 'postgres' user (Debian's postgresql "
                    f"package creates it; see {INSTALL_SCRIPT})"
                ) from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                "--",
            ]

    @property
    def log_path(self) -> Path:
        return self.dir / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=10"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Create the cluster and start the server on a free port."""
        init = subprocess.run(
            [
                *self._as_user,
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=self.dir,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()}")
        atexit.register(self.stop)
        for _attempt in range(3):  # a free port may be taken before the server binds it
            self.port = _free_port()
            if self._launch(timeout):
                return self
        raise RuntimeError(f"PostgreSQL did not start; its log:\n{self._log_tail()}")

    def restart(self, timeout: float = 60.0) -> None:
        """Start the stopped server again, on the same port and data (after `kill`)."""
        if not self._launch(timeout):
            raise RuntimeError(f"PostgreSQL did not restart; its log:\n{self._log_tail()}")

    def kill(self) -> None:
        """Stop the server (by its PID), keeping its data for `restart`."""
        self._terminate()

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def _launch(self, timeout: float) -> bool:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    *self._as_user,
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-k",
                    str(self.dir),
                    "-p",
                    str(self.port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",  # a throwaway test cluster: durability is not under test
                    "-c",
                    "max_connections=200",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        if self._wait_ready(timeout):
            return True
        self._terminate()
        return False

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.1)
        return False

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its DSN."""
        name = name or f"t{os.getpid()}_{next(_DB_SEQ)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        # fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL: always by PID
        for sig, wait in ((signal.SIGINT, 20), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
            try:
                os.kill(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        """Stop the server by its PID and remove its directory."""
        self._terminate()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A started server, stopped and removed when the block ends."""
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()


if __name__ == "__main__":
    with running_postgres() as pg:
        print(pg.dsn(), flush=True)
        input("PostgreSQL is running; press Enter to stop it. ")
