"""Where asyncagents keeps its state and where its service listens, by default.

One home for these, because the manager (its SQLite store), the service (its token), the CLI
and the plugin installer (the service's address) must agree on them.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SERVICE_URL",
    "default_store_path",
    "default_token_path",
    "state_dir",
]

#: the service listens on loopback only, unless told otherwise
DEFAULT_HOST = "127.0.0.1"
#: OpenCode's own default is 4096; the service takes the next port
DEFAULT_PORT = 4097
#: where the plugin calls the service, unless told otherwise
DEFAULT_SERVICE_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


def state_dir() -> Path:
    """``$XDG_STATE_HOME/asyncagents``, else ``~/.local/state/asyncagents``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "asyncagents"


def default_store_path() -> Path:
    """``$ASYNCAGENTS_TASKS_DB``, else ``<state dir>/tasks.sqlite3``."""
    env = os.environ.get("ASYNCAGENTS_TASKS_DB")
    return Path(env) if env else state_dir() / "tasks.sqlite3"


def default_token_path() -> Path:
    """``$ASYNCAGENTS_TOKEN_FILE``, else ``<state dir>/token``."""
    env = os.environ.get("ASYNCAGENTS_TOKEN_FILE")
    return Path(env) if env else state_dir() / "token"
