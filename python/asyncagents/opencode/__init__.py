"""The OpenCode side of asyncagents: the plugin that offers the five tools, and its installer."""

from ..locations import DEFAULT_SERVICE_URL
from .install import (
    OPENCODE_VERSION,
    Installed,
    InstallError,
    find_opencode_version,
    install_plugin,
    plugin_source,
    service_url_problem,
)

__all__ = [
    "DEFAULT_SERVICE_URL",
    "OPENCODE_VERSION",
    "InstallError",
    "Installed",
    "find_opencode_version",
    "install_plugin",
    "plugin_source",
    "service_url_problem",
]
