"""Support of the service tests: a scripted in-process model and an app client."""

from __future__ import annotations

from tasks_script import Script as Responder

__all__ = ["TOKEN", "Responder"]

#: the bearer token of the apps under test
TOKEN = "t" * 64
