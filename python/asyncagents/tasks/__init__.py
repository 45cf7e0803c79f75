"""Background sub-agent tasks: launch, watch, resume, cancel and clear child sessions.

`TaskManager` runs tasks over a `SessionBackend` (`OpenCodeBackend` for a real
``opencode serve``, `InProcessBackend` to embed it without one) and keeps them in a `TaskStore`
(`SQLiteTaskStore` by default, `InMemoryTaskStore` for tests). `TOOLS` and `run_tool` are the
agent-facing side. Importing it imports `asyncagents`, and so loads the Rust extension of the
fork pipeline, which a forked launch runs.
"""

from typing import TYPE_CHECKING, Any

from ..locations import default_store_path
from .backend import PromptRequest, SessionBackend
from .config import TaskManagerConfig, WakeMode
from .errors import (
    AmbiguousTaskIdError,
    BackendAuthError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendRedirectError,
    BackendResponseTooLargeError,
    BackendTimeoutError,
    BackendUnavailableError,
    ForkResumeConflictError,
    SessionExpiredError,
    SessionNotFoundError,
    StoreError,
    TaskBeingResumedError,
    TaskError,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskRequestError,
)
from .events import EventFollower
from .inprocess import InProcessBackend, InProcessTurn, ProviderError
from .manager import TaskManager
from .models import (
    Notice,
    NoticeKind,
    OutputResult,
    Task,
    TaskChange,
    TaskChangeKind,
    TaskProgress,
    TaskStatus,
)
from .notices import NoticeCourier
from .opencode import OpenCodeBackend, OpenCodeCredentials
from .store import InMemoryTaskStore, SQLiteTaskStore, TaskStore
from .tools import (
    DEFAULT_OUTPUT_TIMEOUT_SECONDS,
    TOOL_NAMES,
    TOOLS,
    ToolDefinition,
    disabled_tools,
    run_tool,
)
from .turns import TurnState, read_turn

if TYPE_CHECKING:
    from .store import PostgresTaskStore

__all__ = [
    "DEFAULT_OUTPUT_TIMEOUT_SECONDS",
    "TOOLS",
    "TOOL_NAMES",
    "AmbiguousTaskIdError",
    "BackendAuthError",
    "BackendError",
    "BackendHTTPError",
    "BackendProtocolError",
    "BackendRedirectError",
    "BackendResponseTooLargeError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "EventFollower",
    "ForkResumeConflictError",
    "InMemoryTaskStore",
    "InProcessBackend",
    "InProcessTurn",
    "Notice",
    "NoticeCourier",
    "NoticeKind",
    "OpenCodeBackend",
    "OpenCodeCredentials",
    "OutputResult",
    "PostgresTaskStore",
    "PromptRequest",
    "ProviderError",
    "SQLiteTaskStore",
    "SessionBackend",
    "SessionExpiredError",
    "SessionNotFoundError",
    "StoreError",
    "Task",
    "TaskBeingResumedError",
    "TaskChange",
    "TaskChangeKind",
    "TaskError",
    "TaskManager",
    "TaskManagerConfig",
    "TaskNotCompletedError",
    "TaskNotFoundError",
    "TaskNotRunningError",
    "TaskProgress",
    "TaskRequestError",
    "TaskStatus",
    "TaskStore",
    "ToolDefinition",
    "TurnState",
    "WakeMode",
    "default_store_path",
    "disabled_tools",
    "read_turn",
    "run_tool",
]


def __getattr__(name: str) -> Any:
    """`PostgresTaskStore` on first use: psycopg is an optional dependency."""
    if name == "PostgresTaskStore":
        from . import store

        return store.PostgresTaskStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
