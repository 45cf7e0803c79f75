"""`Watcher`: proves when a followed turn has ended, and ends it once.

Completion is proven from the messages (see `turns.read_turn`), woken by events, and re-checked
by a periodic reconciliation and after every event-stream reconnect, so a lost event costs at
most one poll interval. A turn that has not ended but whose session showed no sign of life (no
event, not busy in ``/session/status``) for ``stall_timeout`` seconds was lost by the server (a
restart drops the run and leaves its last message unfinished forever): it ends in ``error``.
Each check also counts the child's tokens and cost (`usage`), stores them when they changed, and
holds the turn to its runaway guards (`guards`): a tripped guard ends the turn in ``error``
and aborts the child session. A turn without progress for ``idle_timeout`` seconds while the
server says it is busy (a hung model stream) is one of them.
Only the owner of a task watches it; a check that finds the task ended, cleared or owned by
another manager simply stops following it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from .backend import JSON, SessionBackend
from .config import TaskManagerConfig
from .errors import BackendError, SessionNotFoundError
from .events import EventFollower, event_properties, event_session_id, event_type
from .guards import (
    TreeSpend,
    count_reason,
    idle_reason,
    limits_of,
    runtime_exceeded,
    tree_cost_reason,
)
from .jobs import Jobs
from .models import Task, TaskProgress, TaskStatus, now_ms
from .recorder import Recorder, end_kind
from .registry import Run, RunRegistry
from .retries import plan_retry, retry_status
from .store import TaskStore
from .transitions import Usage, counted, finished, retried
from .turns import TurnState, format_error, read_turn, tool_call_id
from .usage import session_usage

log = logging.getLogger(__name__)

STALLED = (
    "The task's run stopped without finishing: its session is idle on the server but the turn "
    "has no final reply (the OpenCode server was probably restarted during the run). Start a new "
    "asyncagents_task to try again."
)
SESSION_DELETED = "The task's session was deleted before it finished."


class Watcher:
    """Checks the runs of a `RunRegistry` against the server and records their ends."""

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore,
        registry: RunRegistry,
        recorder: Recorder,
        config: TaskManagerConfig,
        jobs: Jobs,
        *,
        owner: str,
        on_parent_idle: Callable[[str], None],
        on_session_deleted: Callable[[str], Coroutine[Any, Any, None]],
        on_connect: Callable[[], None],
    ) -> None:
        self._backend = backend
        self._store = store
        self._registry = registry
        self._recorder = recorder
        self._config = config
        self._jobs = jobs
        self._owner = owner
        self._on_parent_idle = on_parent_idle
        self._on_session_deleted = on_session_deleted
        self._on_connect_hook = on_connect
        self.events = EventFollower(backend, self.on_event, on_connect=self._on_connect)
        # only tasks above max_depth (added with the admission queue; 1 until then) have trees;
        # other workers' costs are read every 5 s at most, this one's as it stores them
        self.tree = TreeSpend(store, 5.0, int(getattr(config, "max_depth", 1)))
        self._loop_task: asyncio.Task[None] | None = None
        self._running = False
        #: called with a task whose turn ended into its next one, a queued follow-up or a try
        #: again (set by the manager, which queues or sends it)
        self.on_followup: Callable[[Task], None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        if self._config.follow_events:
            self.events.start()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(
                self._reconcile_loop(), name="task-reconciler"
            )

    async def stop(self) -> None:
        self._running = False
        await self.events.stop()
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reconcile_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.poll_interval)
            self.reconcile()

    async def _on_connect(self) -> None:
        """After every (re)connection: re-check what may have been missed."""
        self.reconcile()
        self._on_connect_hook()

    # -- following ----------------------------------------------------------------------------

    def follow(self, task: Task) -> Run:
        """Follow the current turn of `task`; check it at once when its prompt already ran."""
        run = self._registry.follow(task)
        if run.prompt_sent:
            self.schedule_check(task.id)
        return run

    def reconcile(self) -> None:
        """Schedule a check of every followed run now (also done periodically)."""
        for run in self._registry:
            self.schedule_check(run.task_id)

    def schedule_check(self, task_id: str) -> None:
        run = self._registry.get(task_id)
        if run is None or run.check_pending or not self._running:
            return
        run.check_pending = True
        self._jobs.spawn(self.check(run))

    async def check(self, run: Run) -> None:
        """Prove from the messages whether the run's turn has ended; finish it if so."""
        async with run.lock:
            run.check_pending = False
            if self._registry.get(run.task_id) is not run or not run.prompt_sent:
                return
            try:
                task = await self._store.get(run.task_id)
            except Exception as exc:
                log.info("check of %s postponed: the store failed: %s", run.task_id, exc)
                return
            if (
                task is None
                or not task.status.active
                or task.turn != run.turn
                or (task.owner is not None and task.owner != self._owner)
            ):
                # ended, cancelled or cleared (maybe by another manager), or taken over
                self._registry.drop(run.task_id, run.turn)
                return
            state = await self._read_turn(run, task)
            if state is None:
                return
            if state.done:
                await self._end_turn(run, state, task)
                return
            limits = limits_of(self._config, task)
            reason = await self._guard_reason(run, task)
            if reason is not None:
                await self._stop(run, state, reason)
                return
            await self._store_usage(run, task)
            idle = limits.idle_timeout is not None and run.idle_for() >= limits.idle_timeout
            stalled = run.first_error is not None or run.quiet_for() >= self._config.stall_timeout
            if not idle and not stalled:
                return
            # an error seen, quiet too long or no progress: the session's status decides
            try:
                busy = run.session_id in await self._backend.status()
            except BackendError:
                return
            if busy:
                if idle and limits.idle_timeout is not None:
                    # busy without progress: a hung model stream or a stuck tool
                    await self._stop(run, state, idle_reason(limits.idle_timeout))
                    return
                run.touch()
                return
            if not stalled:
                return  # idle but not busy: the stall timeout decides
            # the turn may have ended between the read above and the status: read it again
            state = await self._read_turn(run, task)
            if state is None:
                return
            if state.done:
                await self._end_turn(run, state, task)
            elif run.first_error is not None:
                # an error before any assistant message (bad agent/model...)
                await self.finish(run.task_id, run.turn, TaskStatus.ERROR, error=run.first_error)
            else:
                await self.finish(
                    run.task_id,
                    run.turn,
                    TaskStatus.ERROR,
                    error=STALLED,
                    text=state.text or None,
                    progress=state.progress,
                )

    async def _read_turn(self, run: Run, task: Task) -> TurnState | None:
        """The run's turn as the messages show it; None when the check must wait or stop."""
        try:
            messages = await self._backend.messages(run.session_id)
        except SessionNotFoundError:
            await self.session_gone(run)
            return None
        except BackendError as exc:
            log.info("check of %s postponed: %s", task.id, exc)
            return None
        state = read_turn(messages, run.after_message_id)
        if run.usage.add_messages(messages) and not state.done:
            self._report_progress(run)
        if run.activity is not None and run.activity != state.activity:
            run.progressed()
        run.activity = state.activity
        # calls events showed that these messages do not have yet still count
        state.progress.tool_calls += len(run.call_ids - state.call_ids)
        run.call_ids |= state.call_ids
        state.progress.retry = run.progress.retry
        state.progress.provider_retries = run.progress.provider_retries
        counted, run.progress = run.progress.tool_calls, state.progress
        if not state.done and run.progress.tool_calls != counted:
            self._report_progress(run)
        return state

    async def _end_turn(self, run: Run, state: TurnState, task: Task) -> None:
        """Finish a run whose turn the messages prove ended: its reply, or its error; a
        retryable provider error is tried again instead (`retries`), while tries remain."""
        plan = None
        interrupted = bool(task.pending_followups) and task.pending_followups[0].interrupt
        if state.error is not None and state.last_message_id and not interrupted:
            config = self._config
            plan = plan_retry(
                state.error_object,
                task.model,
                task.tries or [task.model],
                attempts=config.attempts,
                fallback_models=config.fallback_models,
                initial=config.retry_initial,
                longest=config.retry_max,
            )
        if plan is not None and state.last_message_id is not None and state.error is not None:
            mutate = retried(run.turn, state.last_message_id, plan.model, plan.delay, state.error)
            out = await self._recorder.apply(run.task_id, mutate, "task.updated", background=True)
            if out is not None and self.on_followup is not None:
                self.on_followup(out[0])
            return
        await self.finish(
            run.task_id,
            run.turn,
            TaskStatus.COMPLETED if state.error is None else TaskStatus.ERROR,
            error=state.error,
            text=state.text,
            progress=state.progress,
            usage=run_usage(run),
            after=state.last_message_id,
        )

    # -- guards and accounting ----------------------------------------------------------------

    async def _guard_reason(self, run: Run, task: Task) -> str | None:
        """Why a guard stops the run now (counts, spend, wall clock), or None."""
        limits = limits_of(self._config, task)
        usage = run_usage(run)
        total = usage.total if usage is not None else task.usage
        reason = count_reason(limits, run.progress.tool_calls, total)
        if reason is None and limits.tree_max_cost is not None:
            try:
                tree = await self.tree.cost(task, total)
            except Exception as exc:  # a store that fails once may answer next time
                log.info("tree cost of %s not read: %s", task.id, exc)
            else:
                if tree > limits.tree_max_cost:
                    reason = tree_cost_reason(task.tree_id, tree, limits.tree_max_cost)
        return reason or runtime_exceeded(limits, task.turn_started_at, now_ms())

    async def _stop(self, run: Run, state: TurnState, reason: str) -> None:
        """A guard tripped: end the turn in error with `reason` (one notice), then abort."""
        log.info("task %s %s", run.task_id, reason)
        ended = await self.finish(
            run.task_id,
            run.turn,
            TaskStatus.ERROR,
            error=reason,
            text=state.text or None,
            progress=state.progress,
            usage=run_usage(run),
        )
        if ended is not None:
            await abort_quietly(self._backend, run.session_id)

    async def _store_usage(self, run: Run, task: Task) -> None:
        """Store the turn's tokens and cost when they changed (other workers sum trees)."""
        usage = run_usage(run)
        if usage is None or (usage.total, usage.turn, usage.by_model) == (
            task.usage,
            task.turn_usage,
            task.usage_by_model,
        ):
            return
        try:
            out = await self._store.update(task.id, counted(run.turn, usage))
        except Exception as exc:  # the next check writes them again
            log.info("usage of %s not stored: %s", task.id, exc)
            return
        if out is not None:
            self.tree.forget(out[0].tree_id)
        if out is not None and self._registry.get(run.task_id) is run:
            # listeners get the live progress too (the store keeps it at the turn's end)
            run.task = out[0]
            self._recorder.emit("task.updated", out[0].model_copy(update=live_update(run)))

    def _over_count_limit(self, run: Run) -> bool:
        usage = run_usage(run)
        total = usage.total if usage is not None else run.task.usage
        limits = limits_of(self._config, run.task)
        return count_reason(limits, run.progress.tool_calls, total) is not None

    async def finish(
        self,
        task_id: str,
        turn: int,
        status: TaskStatus,
        *,
        text: str | None = None,
        error: str | None = None,
        progress: TaskProgress | None = None,
        usage: Usage | None = None,
        after: str | None = None,
    ) -> Task | None:
        """End a turn once (compare-and-set on turn and status), with its notice; a queued
        follow-up that it queued for admission (or sent at once, or that must be queued) goes
        to `on_followup`."""
        mutate = finished(
            turn,
            status,
            text=text,
            error=error,
            progress=progress,
            notify=self._config.notify_parent,
            owner=self._owner,
            usage=usage,
            result_chars=self._config.notice_result_chars,
            after=after,
        )
        out = await self._recorder.apply(task_id, mutate, end_kind, background=True)
        if out is None:
            return None
        if usage is not None:
            self.tree.forget(out[0].tree_id)
        task = out[0]
        if self.on_followup is not None and (
            task.status.pending or (task.status is TaskStatus.COMPLETED and task.pending_followups)
        ):
            self.on_followup(task)
        return task

    async def session_gone(self, run: Run) -> None:
        """The child session of a followed run was deleted: end the task, stop its run.

        OpenCode keeps running a deleted session's turn (deleting a parent deletes its children
        the same way), and only an abort stops it.
        """
        await self.finish(run.task_id, run.turn, TaskStatus.ERROR, error=SESSION_DELETED)
        await abort_quietly(self._backend, run.session_id)

    async def fresh(self, task: Task) -> Task:
        """A running task with its progress and usage read from its messages now (else what
        events showed)."""
        run = self._registry.get(task.id)
        after = run.after_message_id if run is not None else task.turn_after_message_id
        started = (run is not None and run.prompt_sent) or task.turn_started_at is not None
        if task.session_id and started:
            try:
                messages = await self._backend.messages(task.session_id)
            except BackendError:
                pass
            else:
                total, turn, by_model = session_usage(messages, after)
                progress = read_turn(messages, after).progress
                if run is not None:
                    progress.retry = run.progress.retry
                return task.model_copy(
                    update={
                        "progress": progress,
                        "usage": total,
                        "turn_usage": turn,
                        "usage_by_model": by_model,
                    }
                )
        if run is None:
            return task
        return task.model_copy(update=live_update(run))

    # -- events -------------------------------------------------------------------------------

    def on_event(self, event: JSON) -> None:
        """Dispatch one server event (never blocks: work goes to background jobs)."""
        kind = event_type(event)
        if kind in ("server.heartbeat", "server.connected"):
            return
        if kind == "message.part.delta":
            sid = event_properties(event).get("sessionID")
            if isinstance(sid, str):
                delta_run = self._registry.by_session(sid)
                if delta_run is not None:
                    delta_run.progressed()
                    delta_run.progress.retry = None  # the provider answers again
            return
        sid = event_session_id(event)
        if sid is None:
            return
        run = self._registry.by_session(sid)
        if run is not None:
            run.touch()
            if kind.startswith("message."):
                run.progressed()
        if kind == "session.idle" or (
            kind == "session.status"
            and (event_properties(event).get("status") or {}).get("type") == "idle"
        ):
            if run is not None:
                self.schedule_check(run.task_id)
            # a parent that went idle can take its waiting notices now
            self._on_parent_idle(sid)
        elif kind == "session.status" and run is not None:
            status = event_properties(event).get("status")
            retry = retry_status(status) if isinstance(status, dict) else None
            if retry is not None and retry != run.progress.retry:
                # OpenCode retries the provider: alive, and shown as it happens
                run.progress.retry = retry
                attempt = retry.get("attempt")
                if isinstance(attempt, int):
                    run.progress.provider_retries = max(run.progress.provider_retries, attempt)
                self._report_progress(run)
        elif kind == "session.error":
            if run is not None:
                _, text = format_error(event_properties(event).get("error"))
                # the first error of a turn is the reason; OpenCode may follow it with a
                # generic one carrying a stack trace (unknown agent or model)
                if run.first_error is None:
                    run.first_error = text
                self.schedule_check(run.task_id)
        elif kind == "session.deleted":
            self._jobs.spawn(self._on_session_deleted(sid))
        elif kind == "message.updated" and run is not None:
            info = event_properties(event).get("info")
            if isinstance(info, dict) and run.usage.add(info):
                if run.usage.complete:
                    self._report_progress(run)
                if not run.usage.complete or self._over_count_limit(run):
                    self.schedule_check(run.task_id)  # read it all, or stop it
        elif kind == "message.part.updated" and run is not None:
            part = event_properties(event).get("part")
            if isinstance(part, dict) and part.get("type") == "tool":
                run.progress.last_tool = str(part.get("tool") or "unknown")
                run.progress.last_activity_at = now_ms()
                call_id = tool_call_id(part)
                if call_id in run.call_ids:
                    return  # the same call, a later state of it
                run.call_ids.add(call_id)
                run.progress.tool_calls += 1
                self._report_progress(run)
                if self._over_count_limit(run):
                    self.schedule_check(run.task_id)

    def _report_progress(self, run: Run) -> None:
        """Tell the listeners the run's new tool call count (the store keeps a run's progress
        only when its turn ends), while the run is still followed."""
        if self._registry.get(run.task_id) is not run:
            return
        self._recorder.emit("task.updated", run.task.model_copy(update=live_update(run)))


def run_usage(run: Run) -> Usage | None:
    """The run's usage counted so far; None until the session's messages were read once."""
    if not run.usage.complete:
        return None
    return Usage(
        total=run.usage.total(),
        turn=run.usage.since(run.after_message_id),
        by_model=run.usage.by_model(),
    )


def live_update(run: Run) -> dict[str, Any]:
    """What a run knows newer than its stored task: progress, and usage once counted."""
    update: dict[str, Any] = {"progress": run.progress.model_copy()}
    usage = run_usage(run)
    if usage is not None:
        update.update(usage=usage.total, turn_usage=usage.turn, usage_by_model=usage.by_model)
    return update


async def abort_quietly(backend: SessionBackend, session_id: str) -> None:
    """Abort a session's run; a failure is logged (the run may be over already)."""
    try:
        await backend.abort(session_id)
    except BackendError as exc:
        log.warning("abort of %s failed: %s", session_id, exc)
