"""`TaskManagerConfig`: every knob of a `TaskManager` in one frozen, validated value.

Each field's ``description`` is its help text: ``asyncagents serve`` makes one command-line
option, one environment variable and one config-file key of every field from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

WakeMode = Literal["each", "all_done", "never"]
#: the runaway guards: each may be ``off`` (None)
GUARDS = ("max_runtime", "idle_timeout", "max_tool_calls", "max_cost", "max_tokens")

#: defaults of the caps (why these: docs/limits.md)
DEFAULT_MAX_RUNNING = 5
DEFAULT_MAX_QUEUED_PER_PARENT = 200
DEFAULT_MAX_DEPTH = 1


class TaskManagerConfig(BaseModel):
    """How a `TaskManager` works; frozen, so one value can be shared by many managers.

    Times are seconds. `backend_name` names the server the manager works for (default: the
    backend's own `name`: an OpenCode server's URL, or for an `InProcessBackend` a name unique
    to that object, as no other process can follow its sessions): managers sharing a store only
    touch the tasks of their own backend, and adopt those of a dead manager of the same name.
    `wake` says how a parent hears of its tasks: ``"each"`` wakes it with a prompt its agent
    answers once per batch of notices, ``"all_done"`` once its last running task has ended,
    ``"never"`` adds the notice without a reply (``noReply``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend_name: str | None = Field(
        default=None,
        description="the name of the session server this manager works for; managers sharing "
        "a store touch only their own backend's tasks (default: the OpenCode server's URL)",
    )
    instance_id: str | None = Field(
        default=None,
        description="this manager's id in leases and claims (default: a new unique id)",
    )
    poll_interval: float = Field(
        default=5.0,
        gt=0,
        description="seconds between checks of every running task from its messages "
        "(events make it faster)",
    )
    stall_timeout: float = Field(
        default=60.0,
        gt=0,
        description="seconds with no sign of life, and not busy on the server, after which "
        "a turn counts as lost",
    )
    lease_ttl: float = Field(
        default=30.0,
        gt=0,
        description="seconds after which an owner that has not renewed its lease is taken "
        "for dead and its tasks are taken over",
    )
    notice_claim_ttl: float = Field(
        default=60.0,
        gt=0,
        description="seconds one delivery attempt may hold a notice before another manager "
        "may take it",
    )
    notice_interval: float = Field(
        default=1.0,
        gt=0,
        description="seconds between looks at pending notices (a parent going idle looks at once)",
    )
    notice_retry_initial: float = Field(
        default=1.0, gt=0, description="first wait in seconds before a failed delivery is retried"
    )
    notice_retry_max: float = Field(
        default=60.0, gt=0, description="longest wait in seconds between delivery retries"
    )
    store_retry_initial: float = Field(
        default=0.05,
        gt=0,
        description="first wait in seconds before a failed background store write is retried",
    )
    store_retry_max: float = Field(
        default=2.0,
        gt=0,
        description="longest wait in seconds between retries of a background store write",
    )
    store_retry_attempts: int = Field(
        default=6,
        ge=1,
        description="attempts of one background store write before the periodic check "
        "takes it over",
    )
    drain_timeout: float = Field(
        default=10.0,
        ge=0,
        description="seconds a graceful stop waits for prompts being sent (the next owner "
        "re-sends the rest, idempotently)",
    )
    notify_parent: bool = Field(
        default=True, description="tell the parent session when its task ends"
    )
    wait_for_idle_parent: bool = Field(
        default=True,
        description="hold a notice until the parent is idle (a prompt sent to a busy session "
        "is folded into its running turn)",
    )
    wake: WakeMode = Field(
        default="each",
        description="how a parent hears of its ended tasks: woken by each batch of notices, "
        "once all its tasks are done, or never (the notice is added without a reply)",
    )
    model: dict[str, str] | None = Field(
        default=None,
        description="the children's model as providerID=... and modelID=... "
        "(default: the server's default model)",
    )
    allowed_models: tuple[str, ...] | None = Field(
        default=None,
        description="the models (provider/model) a task may ask for (default: any model the "
        "server offers)",
    )
    models_ttl: float = Field(
        default=30.0,
        gt=0,
        description="seconds one reading of the server's models (GET /config/providers) is used",
    )
    attempts: int = Field(
        default=3,
        ge=1,
        description="tries of a turn that ends on a retryable provider error, on each model "
        "(OpenCode's own retries within a try not counted)",
    )
    fallback_models: tuple[str, ...] = Field(
        default=(),
        description="models (provider/model) tried in turn, as often, once the task's model "
        "has had its tries",
    )
    retry_initial: float = Field(
        default=30.0,
        ge=0,
        description="first wait in seconds before a try again (doubled per try, longer than "
        "OpenCode's own; a longer Retry-After wins)",
    )
    retry_max: float = Field(
        default=300.0, ge=0, description="longest wait in seconds before a try again"
    )
    follow_events: bool = Field(
        default=True,
        description="follow the server's event stream (without it, completion is found by "
        "polling alone)",
    )
    delete_cleared_sessions: bool | None = Field(
        default=None,
        description="delete the child sessions of cleared tasks (default: only on the "
        "in-process backend; on a real server they stay for the user to open)",
    )

    # -- admission queue and depth (docs/limits.md) --------------------------------------------
    max_running: int = Field(
        default=DEFAULT_MAX_RUNNING,
        ge=1,
        description="most tasks running at once on this backend, all workers together; more "
        "wait in the queue",
    )
    max_running_per_parent: int | None = Field(
        default=None,
        ge=1,
        description="most tasks of one parent session running at once (default: only max_running)",
    )
    max_running_per_agent: dict[str, int] = Field(
        default_factory=dict,
        description="most tasks running at once per agent, by agent name",
        json_schema_extra={"metavar": "AGENT=N"},
    )
    max_running_per_model: dict[str, int] = Field(
        default_factory=dict,
        description="most tasks running at once per model, keyed provider/model (the key "
        "`default` counts the tasks on the server's default model)",
        json_schema_extra={"metavar": "PROVIDER/MODEL=N"},
    )
    max_queued_per_parent: int = Field(
        default=DEFAULT_MAX_QUEUED_PER_PARENT,
        ge=1,
        description="most tasks of one parent session waiting in the queue; past it "
        "asyncagents_task refuses",
    )
    max_depth: int = Field(
        default=DEFAULT_MAX_DEPTH,
        ge=1,
        description="how deep tasks may nest: 1, children cannot start tasks; 2, a child may "
        "start tasks of its own, and so on",
    )
    admission_interval: float = Field(
        default=1.0,
        gt=0,
        description="seconds between two looks at the queue when nothing else triggers one (a "
        "task that ends admits the next one at once)",
    )

    @field_validator("max_running_per_agent", "max_running_per_model")
    @classmethod
    def _positive_caps(cls, caps: dict[str, int]) -> dict[str, int]:
        for key, value in caps.items():
            if not key:
                raise ValueError("a cap's key must not be empty")
            if value < 1:
                raise ValueError(f"the cap of {key!r} must be 1 or more, got {value}")
        return caps

    @property
    def model_key(self) -> str | None:
        """The children's model as ``provider/model`` (None: the server's default)."""
        if not self.model:
            return None
        provider, model = self.model.get("providerID"), self.model.get("modelID")
        return f"{provider}/{model}" if provider and model else None

    # -- runaway guards (off: none); docs/limits.md says why each default ---------------------
    max_runtime: float | None = Field(
        default=1800.0,
        gt=0,
        description="seconds one turn of a task may run, from its start, before it is stopped "
        "(off: no limit)",
    )
    idle_timeout: float | None = Field(
        default=300.0,
        gt=0,
        description="seconds a running turn may go without a new message, part or tool "
        "progress, even while the server says it is busy (a hung model stream), before it is "
        "stopped (off: no limit)",
    )
    max_tool_calls: int | None = Field(
        default=200,
        ge=1,
        description="tool calls one turn of a task may make before it is stopped (off: no limit)",
    )
    max_cost: float | None = Field(
        default=10.0,
        gt=0,
        description="USD a task, and all the tasks of one top-level session's tree together, "
        "may cost before the running ones are stopped (off: no limit)",
    )
    max_tokens: int | None = Field(
        default=10_000_000,
        ge=1,
        description="tokens (input, output, reasoning, cache read and write) a task may use "
        "over all its turns before it is stopped (off: no limit)",
    )
    notice_result_chars: int = Field(
        default=4000,
        ge=100,
        description="characters of results one notice delivery carries at most (head and "
        "tail kept; asyncagents_output reads the rest)",
    )

    @field_validator(*GUARDS, mode="before")
    @classmethod
    def _off(cls, value: object) -> object:
        """``off`` (an option, a variable, a file) switches a guard off."""
        if isinstance(value, str) and value.strip().lower() == "off":
            return None
        return value
