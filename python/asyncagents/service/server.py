"""Running the service: the manager over one OpenCode server, on uvicorn, stopped gracefully.

SIGTERM or SIGINT: the listening socket closes, new calls on open connections get 503, blocking
``asyncagents_output`` waits answer with the task's status at once, the calls in flight are
answered, then the manager closes its store (tasks keep running in OpenCode; the next start
re-attaches to them and delivers their notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from ..locations import DEFAULT_HOST, DEFAULT_PORT, default_store_path
from ..tasks import OpenCodeBackend, StoreError, TaskManager
from .app import begin_drain, create_app
from .connections import AbortableProtocol
from .hosts import AllowedHosts, is_loopback
from .settings import Settings, open_store, opencode_credentials

#: the longest a stop waits for the calls in flight before it closes the manager anyway
GRACEFUL_SECONDS = 30


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "build_manager", "freeze_startup_heap", "serve"]


def freeze_startup_heap() -> None:
    """Put every object alive once the service has started out of the collector's reach.

    A full collection walks every object the collector tracks. With the service's modules,
    models and app loaded that is about 50,000 objects, 25 to 40 ms on two busy cores, a pause
    that lands inside whatever call runs then: it was most of the p99 of ``task()``. What
    start-up made lives as long as the process, so there is no garbage among it to find
    (``gc.freeze``, as Instagram's and gunicorn's preloading servers do); the objects made
    later are collected as before.
    """
    gc.collect()
    gc.freeze()


def build_manager(settings: Settings) -> TaskManager:
    """A `TaskManager` over the settings' OpenCode server and store, with their config."""
    credentials = opencode_credentials(settings.serve)
    backend = OpenCodeBackend(settings.serve.opencode, credentials=credentials)
    store = open_store(settings.serve.store, default_store_path())
    return TaskManager(backend, store, settings.manager)


async def _store_problem(settings: Settings) -> str | None:
    """Why the settings' store cannot be opened (a wrong password, a file of another
    program, ...), or None: said in one line before the service starts, not as a traceback of
    its startup."""
    store = open_store(settings.serve.store, default_store_path())
    try:
        await store.open()
    except StoreError as exc:
        return str(exc)
    finally:
        await store.close()
    return None


def base_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 address in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class _Server(uvicorn.Server):
    """uvicorn, draining the app on the first stop signal and exiting normally after it."""

    def __init__(self, config: uvicorn.Config, app: Starlette, token: str) -> None:
        super().__init__(config)
        self._app = app
        self._token = token
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            freeze_startup_heap()  # after the lifespan started the manager
            url = base_url(self.config.host, self.config.port)
            print(f"asyncagents serve: ready on {url}", flush=True)
            # the token goes only to a person's terminal, never into a log file or a pipe
            link = f"{url}/#token={self._token}" if sys.stdout.isatty() else f"{url}/"
            print(f"asyncagents serve: dashboard at {link}", flush=True)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(begin_drain, self._app)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own version re-raises the signal after the graceful stop, which would end
        # the process by SIGTERM / KeyboardInterrupt instead of a normal exit
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def uvicorn_config(app: Starlette, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """How the service runs on uvicorn: its protocol lets a response reset its connection
    (a dropped event stream), a stop waits `GRACEFUL_SECONDS` for the calls in flight."""
    settings: dict[str, Any] = {
        "lifespan": "on",
        "log_level": "warning",
        "timeout_graceful_shutdown": GRACEFUL_SECONDS,
        **kwargs,
    }
    return uvicorn.Config(app, host=host, port=port, http=AbortableProtocol, **settings)


def serve(settings: Settings, token: str) -> int:
    """Run the service until a stop signal; the exit status."""
    options = settings.serve
    if not is_loopback(options.host):
        print(
            f"asyncagents serve: listening on {options.host}, not loopback: anyone who can reach "
            "it and has the token can start tasks.",
            file=sys.stderr,
        )
    problem = asyncio.run(_store_problem(settings))
    if problem is not None:
        print(f"asyncagents serve: cannot open the task store: {problem}", file=sys.stderr)
        return 1
    manager = build_manager(settings)
    allowed = AllowedHosts(options.host, options.port, options.allowed_host)
    app = create_app(manager, token=token, allowed_hosts=allowed)
    server = _Server(uvicorn_config(app, options.host, options.port), app, token)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when it cannot bind or start the app
        if exc.code not in (0, None):
            print(
                f"asyncagents serve: could not start on {options.host}:{options.port} "
                "(the reason is above)",
                file=sys.stderr,
            )
            return 1
    if not server.started:
        return 1
    print("asyncagents serve: stopped", flush=True)
    return 0
