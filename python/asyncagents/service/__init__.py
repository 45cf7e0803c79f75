"""``asyncagents serve``: the task manager as an HTTP service for the OpenCode plugin."""

from ..locations import default_token_path, state_dir
from .app import HEALTH_PATH, begin_drain, create_app
from .auth import TokenFileError, load_or_create_token
from .server import build_manager, serve
from .settings import ServeSettings, Settings, SettingsError
from .state import ServiceState

__all__ = [
    "HEALTH_PATH",
    "ServeSettings",
    "ServiceState",
    "Settings",
    "SettingsError",
    "TokenFileError",
    "begin_drain",
    "build_manager",
    "create_app",
    "default_token_path",
    "load_or_create_token",
    "serve",
    "state_dir",
]
