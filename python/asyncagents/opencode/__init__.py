"""The OpenCode side of asyncagents: the plugin that offers the five tools, and its installer."""

from .install import (
    DEFAULT_SERVICE_URL,
    OPENCODE_VERSION,
    Installed,
    InstallError,
    install_plugin,
    plugin_source,
)

__all__ = [
    "DEFAULT_SERVICE_URL",
    "OPENCODE_VERSION",
    "InstallError",
    "Installed",
    "install_plugin",
    "plugin_source",
]
