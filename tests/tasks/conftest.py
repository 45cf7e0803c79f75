"""Fixtures for the manager's own logic: an in-process backend with a scriptable responder."""

from inprocess_fixtures import backend, manager, parent, script, store

__all__ = ["backend", "manager", "parent", "script", "store"]
