"""What the routes of one service share: its manager, and whether it is stopping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tasks.manager import TaskManager


@dataclass
class ServiceState:
    """`app.state.service`: the manager, the drain flag, and the calls being answered."""

    manager: TaskManager
    #: set when a stop was asked: new calls get 503, blocking waits return their status now
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count one call being answered."""
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1
