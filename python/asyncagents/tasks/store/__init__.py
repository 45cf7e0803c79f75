"""Where tasks, manager leases and undelivered notices live.

`TaskStore` (in `base`) is the contract; `InMemoryTaskStore` keeps everything in one process,
`SQLiteTaskStore` in one file shared by the processes of one machine, and `PostgresTaskStore` in
one database shared by many hosts.
"""

from .base import ACTIVE_STATUSES, Mutation, TaskStore
from .memory import InMemoryTaskStore
from .sqlite import SQLiteTaskStore

__all__ = ["ACTIVE_STATUSES", "InMemoryTaskStore", "Mutation", "SQLiteTaskStore", "TaskStore"]
