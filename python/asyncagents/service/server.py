"""Running the service: the manager over one OpenCode server, on uvicorn, stopped gracefully.

SIGTERM or SIGINT: the listening socket closes, new calls on open connections get 503, blocking
``asyncagents_output`` waits answer with the task's status at once, the calls in flight are
answered, then the manager closes its store (tasks keep running in OpenCode; the next start
re-attaches to them and delivers their notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from ..tasks import (
    OpenCodeBackend,
    SQLiteTaskStore,
    TaskManager,
    TaskManagerConfig,
    default_store_path,
)
from ..tasks.config import WakeMode
from .app import begin_drain, create_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4097
#: the longest a stop waits for the calls in flight before it closes the manager anyway
GRACEFUL_SECONDS = 30
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class ServeOptions:
    """What ``asyncagents serve`` was asked for."""

    opencode_url: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    store_path: Path | None = None
    wake: WakeMode = "each"
    #: `TaskManagerConfig` fields given as options (runaway guards, notice size)
    limits: dict[str, Any] = field(default_factory=dict)


def build_manager(options: ServeOptions) -> TaskManager:
    """A `TaskManager` over the OpenCode server at `options.opencode_url`, SQLite store."""
    backend = OpenCodeBackend(options.opencode_url)
    store = SQLiteTaskStore(options.store_path or default_store_path())
    config = TaskManagerConfig.model_validate({"wake": options.wake, **options.limits})
    return TaskManager(backend, store, config)


class _Server(uvicorn.Server):
    """uvicorn, draining the app on the first stop signal and exiting normally after it."""

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            config = self.config
            print(f"asyncagents serve: ready on http://{config.host}:{config.port}", flush=True)

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


def serve(options: ServeOptions, token: str) -> int:
    """Run the service until a stop signal; the exit status."""
    if options.host not in _LOOPBACK:
        print(
            f"asyncagents serve: listening on {options.host}, not loopback: anyone who can reach "
            "it and has the token can start tasks.",
            file=sys.stderr,
        )
    manager = build_manager(options)
    app = create_app(manager, token=token)
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
    )
    server = _Server(config, app)
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
    return 0 if server.started else 1
