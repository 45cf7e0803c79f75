"""Fixtures that run every fork pipeline scenario on both engines and both input forms.

The message builders live in fork_builders.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asyncagents import ForkConfig, ForkContext, build_fork_context

# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(params=["rust", "python"])
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=["objects", "json"])
def form(request: pytest.FixtureRequest) -> str:
    return request.param


Fork = Callable[..., ForkContext]


@pytest.fixture
def fork(engine: str, form: str) -> Fork:
    """``fork(messages, config=None)`` on this engine, from dicts or from their JSON bytes."""

    def run(messages: Any, config: ForkConfig | None = None) -> ForkContext:
        data = json.dumps(messages, ensure_ascii=False).encode() if form == "json" else messages
        return build_fork_context(data, config=config, engine=engine)

    return run
