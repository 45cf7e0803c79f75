"""Where tasks, manager leases and undelivered notices live.

`TaskStore` (in `base`) is the contract; `InMemoryTaskStore` keeps everything in one process,
`SQLiteTaskStore` in one file shared by the processes of one machine, and `PostgresTaskStore` in
one database shared by many hosts. `PostgresTaskStore` is imported on first use, so psycopg (the
``asyncagents[postgres]`` extra) is needed only by those who use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import ACTIVE_STATUSES, PENDING_STATUSES, Mutation, QueueView, TaskCost, TaskStore
from .memory import InMemoryTaskStore
from .sqlite import SQLiteTaskStore

if TYPE_CHECKING:
    from .postgres import PostgresTaskStore

__all__ = [
    "ACTIVE_STATUSES",
    "PENDING_STATUSES",
    "InMemoryTaskStore",
    "Mutation",
    "PostgresTaskStore",
    "QueueView",
    "SQLiteTaskStore",
    "TaskCost",
    "TaskStore",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresTaskStore":
        try:
            from .postgres import PostgresTaskStore
        except ImportError as exc:
            raise ImportError(
                f"PostgresTaskStore needs psycopg 3 with its pool: pip install "
                f"'asyncagents[postgres]' ({exc})"
            ) from exc
        return PostgresTaskStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
