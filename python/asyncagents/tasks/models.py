"""Task records as the store keeps them: plain pydantic models, JSON round-trippable."""

from __future__ import annotations

import itertools
import os
import time
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TaskStatus(str, Enum):
    """Lifecycle: queued -> running -> completed | error | cancelled; completed -> (queued ->)
    resumed -> completed. A queued task waits for a free slot under the caps (no turn runs)."""

    QUEUED = "queued"
    RUNNING = "running"
    RESUMED = "resumed"
    COMPLETED = "completed"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """True while a turn of the child runs (launch or resume)."""
        return self in (TaskStatus.RUNNING, TaskStatus.RESUMED)

    @property
    def pending(self) -> bool:
        """True while the task has work to do: queued for a slot, or running a turn."""
        return self is TaskStatus.QUEUED or self.active


def now_ms() -> int:
    """Epoch milliseconds, the unit OpenCode uses for every time."""
    return time.time_ns() // 1_000_000


_SEQ = itertools.count()


def new_id(prefix: str) -> str:
    """A sortable unique id: hex ms, a process counter, random hex (newer sorts later)."""
    return f"{prefix}_{now_ms():012x}{next(_SEQ) % 0xFFFFFF:06x}{os.urandom(4).hex()}"


#: OpenCode's message ids: ``msg_`` + 12 hex digits of ``(ms * 0x1000 + counter) mod 2**48``
_ID_TIME_MOD = 1 << 48


def message_id_after(previous: str | None, created_ms: int, token: str) -> str:
    """A message id of our choosing that sorts right after `previous` (the session's newest
    message) and before any message the server creates later.

    OpenCode takes a prompt's ``messageID`` as the user message's id, and a prompt sent twice with
    one id is stored once and answered once; so a re-sent prompt is idempotent. OpenCode sorts
    messages by id and ends its loop when the newest assistant id passes the newest user id, so
    ours must sort between the messages before it and the reply: ``previous + token`` does (any
    later id differs from `previous` within its length). A session without messages gets
    OpenCode's own id of its creation time with counter 0, which sorts before every id OpenCode
    makes at or after that time. `token` (alphanumeric) makes the id unique to the task's turn.
    """
    if previous is None:
        previous = f"msg_{(created_ms * 0x1000) % _ID_TIME_MOD:012x}"
    return previous + token


class TaskProgress(BaseModel):
    """What a running child has done so far, for the output tool."""

    tool_calls: int = 0
    last_tool: str | None = None
    last_activity_at: int | None = None
    steps: int = 0
    #: tool calls by tool name (the stats add them up across tasks)
    tools: dict[str, int] = Field(default_factory=dict)
    #: OpenCode retrying the provider now: ``{attempt, message, next}`` (``next``: epoch ms)
    retry: dict[str, Any] | None = None
    #: how many times OpenCode retried the provider in this turn (its retry status's attempt)
    provider_retries: int = 0
    #: the model that answered the turn (``provider/model`` of its last assistant message)
    model: str | None = None


class FollowUp(BaseModel):
    """A prompt for a running task, stored until its current turn ends (``when``)."""

    id: str = Field(default_factory=lambda: new_id("fup"))
    prompt: str
    #: ``when="now"``: the running turn is aborted for it (it goes before the others)
    interrupt: bool = False
    #: the tail of its message id (`message_id_after`), so a re-sent prompt is one message
    token: str = Field(default_factory=lambda: os.urandom(5).hex())
    queued_at: int = Field(default_factory=now_ms)


class TaskUsage(BaseModel):
    """Tokens and cost of a child's model calls: the sums of its assistant messages'
    ``info.tokens`` and ``info.cost`` (USD, as OpenCode prices them)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        """Every token counted: input, output, reasoning, cache read and cache write."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.reasoning_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: TaskUsage) -> TaskUsage:
        return TaskUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost=self.cost + other.cost,
        )


class TaskLimits(BaseModel):
    """Limits the `asyncagents_task` call set for one task, lower than the manager's (None:
    the manager's)."""

    max_runtime: float | None = None
    max_tool_calls: int | None = None
    max_cost: float | None = None
    max_tokens: int | None = None


class Task(BaseModel):
    """One background task: a child session of `parent_session_id` running `prompt`."""

    model_config = ConfigDict(use_enum_values=False)

    id: str
    parent_session_id: str
    session_id: str | None = None
    prompt: str
    agent: str
    description: str
    status: TaskStatus = TaskStatus.RUNNING
    is_forked: bool = False
    resume_count: int = 0
    #: increases with each turn (launch = 1, each resume + 1); guards stale completions
    turn: int = 1
    #: last message id before this turn's prompt; the turn is every message after it
    turn_after_message_id: str | None = None
    #: set once the turn's prompt was accepted by the server
    turn_started_at: int | None = None
    #: the message ids chosen for the fork context and the current turn's prompt, so a prompt
    #: re-sent after a stop or a crash is one message, answered once (`message_id_after`)
    context_message_id: str | None = None
    prompt_message_id: str | None = None
    last_prompt: str | None = None
    created_at: int = Field(default_factory=now_ms)
    updated_at: int = Field(default_factory=now_ms)
    completed_at: int | None = None
    result: str | None = None
    error: str | None = None
    result_retrieved_at: int | None = None
    progress: TaskProgress = Field(default_factory=TaskProgress)
    fork_stats: dict[str, Any] | None = None
    #: the child's model, ``provider/model``; None: the server's default (per-model caps count
    #: it under ``default``)
    model: str | None = None
    #: a fork keeps only the last N user turns of the parent; None: all
    fork_turns: int | None = None
    #: follow-ups sent to the running task, oldest first: each is the next resume
    pending_followups: list[FollowUp] = Field(default_factory=list)
    #: the model of each try of the current turn, once it was tried again after a provider
    #: error (empty: one try)
    tries: list[str | None] = Field(default_factory=list)
    #: when the next try of the turn is sent (epoch ms), and the error it follows
    retry_at: int | None = None
    retry_error: str | None = None
    #: name of the backend (session server) the task runs on; other backends' managers skip it
    backend: str = ""
    #: instance id of the manager that follows the task (under its lease); None = nobody yet.
    #: A queued task's owner only prepares its fork: any live manager of the backend admits it
    owner: str | None = None
    #: 1 for a task of a top-level session, 2 for a task its child started, and so on
    depth: int = 1
    #: the top-level session of the task's tree (its parent's root, else its parent)
    root_session_id: str = ""
    #: a forked task whose copy of the parent's context is not in its session yet; it is not
    #: admitted before (nor a new task whose session is not created yet: see `ready`)
    fork_pending: bool = False
    #: when the current turn was admitted (left the queue)
    admitted_at: int | None = None

    @model_validator(mode="after")
    def _default_root(self) -> Task:
        """A task of a top-level session is the root of its tree (also for older records)."""
        if not self.root_session_id:
            self.root_session_id = self.parent_session_id
        return self

    #: tokens and cost of every turn together, and of the current (or last) turn
    usage: TaskUsage = Field(default_factory=TaskUsage)
    turn_usage: TaskUsage = Field(default_factory=TaskUsage)
    #: `usage` by model (``providerID/modelID`` of the assistant messages)
    usage_by_model: dict[str, TaskUsage] = Field(default_factory=dict)
    limits: TaskLimits = Field(default_factory=TaskLimits)

    @property
    def ready(self) -> bool:
        """It may be admitted: its child session exists (a new task's is created in the
        background, after it is stored) and its fork's context is in it."""
        return self.session_id is not None and not self.fork_pending

    @property
    def tree_id(self) -> str:
        """The top-level session whose tree of tasks this task belongs to."""
        return self.root_session_id or self.parent_session_id

    @property
    def label(self) -> str:
        """The id with the seed's marks: ``(forked)`` and ``(resumed)``."""
        marks = (" (forked)" if self.is_forked else "") + (
            " (resumed)" if self.resume_count > 0 else ""
        )
        return self.id + marks


class NoticeKind(str, Enum):
    """Why the parent is told something."""

    COMPLETED = "completed"
    ERROR = "error"
    RESUME_COMPLETED = "resume_completed"
    #: a follow-up failed or was aborted; the task is `completed` again with its last result
    RESUME_FAILED = "resume_failed"


class Notice(BaseModel):
    """A message for a parent session, kept until it is delivered."""

    id: str = Field(default_factory=lambda: new_id("ntc"))
    task_id: str
    parent_session_id: str
    kind: NoticeKind
    turn: int
    text: str
    created_at: int = Field(default_factory=now_ms)
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: int = 0
    #: name of the backend the notice's task ran on; only its managers deliver it
    backend: str = ""
    #: manager instance that claimed the notice for delivery, until `claim_expires_at` (ms)
    claimed_by: str | None = None
    claim_expires_at: int | None = None
    #: the whole result the text shows (cut), and where it sits in the text: a delivery of
    #: many notices cuts it further to keep them all within a bound
    result: str | None = None
    result_span: tuple[int, int] | None = None


class OutputResult(BaseModel):
    """What `TaskManager.output` returns: the task, and whether a block timed out."""

    task: Task
    timed_out: bool = False
    waited_seconds: float = 0.0


TaskChangeKind = Literal[
    "task.created",
    "task.updated",
    "task.completed",
    "task.error",
    "task.cancelled",
    "task.resumed",
    "task.cleared",
]


class TaskChange(BaseModel):
    """What a `TaskManager` listener receives after each stored change of a task."""

    model_config = ConfigDict(frozen=True)

    kind: TaskChangeKind
    task: Task
