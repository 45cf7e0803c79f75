"""`TaskManagerConfig`: every knob of a `TaskManager` in one frozen, validated value.

Each field's ``description`` is its help text: ``asyncagents serve`` makes one command-line
option, one environment variable and one config-file key of every field from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WakeMode = Literal["each", "all_done", "never"]


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
