"""`TaskManagerConfig`: every knob of a `TaskManager` in one frozen, validated value."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WakeMode = Literal["each", "all_done", "never"]


class TaskManagerConfig(BaseModel):
    """How a `TaskManager` works; frozen, so one value can be shared by many managers.

    Times are seconds. `backend_name` names the server the manager works for (default: the
    backend's ``base_url``, or ``"inprocess"``): managers sharing a store only touch the tasks of
    their own backend. `wake` says how a parent hears of its tasks: ``"each"`` wakes it with a
    prompt its agent answers once per batch of notices, ``"all_done"`` once its last running task
    has ended, ``"never"`` adds the notice without a reply (``noReply``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend_name: str | None = None
    #: this manager's id in leases and claims; default a new unique id per manager
    instance_id: str | None = None
    #: how often every running task is re-checked from its messages (events make it faster)
    poll_interval: float = Field(default=5.0, gt=0)
    #: a turn with no sign of life for this long, and not busy on the server, was lost
    stall_timeout: float = Field(default=60.0, gt=0)
    #: an owner that has not renewed its lease for this long is taken for dead
    lease_ttl: float = Field(default=30.0, gt=0)
    #: how long one delivery attempt may hold a notice before another manager may take it
    notice_claim_ttl: float = Field(default=60.0, gt=0)
    #: how often pending notices are looked at (a parent going idle looks at once)
    notice_interval: float = Field(default=1.0, gt=0)
    notice_retry_initial: float = Field(default=1.0, gt=0)
    notice_retry_max: float = Field(default=60.0, gt=0)
    #: first and longest wait between retries of a failed background store write
    store_retry_initial: float = Field(default=0.05, gt=0)
    store_retry_max: float = Field(default=2.0, gt=0)
    #: attempts of one background store write before the periodic check takes it over
    store_retry_attempts: int = Field(default=6, ge=1)
    #: how long a graceful `close` waits for prompts being sent (the next owner re-sends the
    #: rest, idempotently)
    drain_timeout: float = Field(default=10.0, ge=0)
    notify_parent: bool = True
    wait_for_idle_parent: bool = True
    wake: WakeMode = "each"
    #: ``{"providerID": ..., "modelID": ...}`` for the children; None: the server's default
    model: dict[str, str] | None = None
    #: the models (``provider/model``) a task may ask for; None: any the server offers
    allowed_models: tuple[str, ...] | None = None
    #: how long one reading of the server's models (``GET /config/providers``) is used
    models_ttl: float = Field(default=30.0, gt=0)
    #: tries of a turn that ends on a retryable provider error, on each model (OpenCode's own
    #: retries within a try not counted); then each of `fallback_models` in turn, as often
    attempts: int = Field(default=3, ge=1)
    fallback_models: tuple[str, ...] = ()
    #: the first wait before a try again (doubled per try, at most `retry_max`), longer than
    #: OpenCode's own; a longer ``Retry-After`` of the error wins
    retry_initial: float = Field(default=30.0, ge=0)
    retry_max: float = Field(default=300.0, ge=0)
    follow_events: bool = True
    #: `clear` deletes the cleared tasks' child sessions (no tool can reach them any more).
    #: None: only on the in-process backend (nobody else can read its sessions); on a real
    #: server they stay, for the user to open
    delete_cleared_sessions: bool | None = None
