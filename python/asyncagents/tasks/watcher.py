"""`Watcher`: proves when a followed turn has ended, and ends it once.

Completion is proven from the messages (see `turns.read_turn`), woken by events, and re-checked
by a periodic reconciliation and after every event-stream reconnect, so a lost event costs at
most one poll interval. A turn that has not ended but whose session showed no sign of life (no
event, not busy in ``/session/status``) for ``stall_timeout`` seconds was lost by the server (a
restart drops the run and leaves its last message unfinished forever): it ends in ``error``.
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
from .jobs import Jobs
from .models import Task, TaskProgress, TaskStatus, now_ms
from .recorder import Recorder, end_kind
from .registry import Run, RunRegistry
from .retries import plan_retry, retry_status
from .store import TaskStore
from .transitions import finished, retried
from .turns import TurnState, format_error, read_turn, tool_call_id

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
        self._loop_task: asyncio.Task[None] | None = None
        self._running = False
        #: called with a task whose turn ended into its next queued follow-up (set by the
        #: manager, which sends it)
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
            if run.first_error is None and run.quiet_for() < self._config.stall_timeout:
                return
            # an error seen, or quiet too long: the session's status decides
            try:
                busy = run.session_id in await self._backend.status()
            except BackendError:
                return
            if busy:
                run.touch()
                return
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
            after=state.last_message_id,
        )

    async def finish(
        self,
        task_id: str,
        turn: int,
        status: TaskStatus,
        *,
        text: str | None = None,
        error: str | None = None,
        progress: TaskProgress | None = None,
        after: str | None = None,
    ) -> Task | None:
        """End a turn once (compare-and-set on turn and status), with its notice; a queued
        follow-up that starts with it (or must be started) goes to `on_followup`."""
        mutate = finished(
            turn,
            status,
            text=text,
            error=error,
            progress=progress,
            notify=self._config.notify_parent,
            owner=self._owner,
            after=after,
        )
        out = await self._recorder.apply(task_id, mutate, end_kind, background=True)
        if out is None:
            return None
        task = out[0]
        if self.on_followup is not None and (
            task.status.active or (task.status is TaskStatus.COMPLETED and task.pending_followups)
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

    async def fresh_progress(self, task: Task) -> TaskProgress:
        """A running task's progress read from its messages now (else what events showed)."""
        run = self._registry.get(task.id)
        after = run.after_message_id if run is not None else task.turn_after_message_id
        started = (run is not None and run.prompt_sent) or task.turn_started_at is not None
        if task.session_id and started:
            try:
                messages = await self._backend.messages(task.session_id)
                progress = read_turn(messages, after).progress
                if run is not None:
                    progress.retry = run.progress.retry
                return progress
            except BackendError:
                pass
        return run.progress if run is not None else task.progress

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
                    delta_run.touch()
                    delta_run.progress.retry = None  # the provider answers again
            return
        sid = event_session_id(event)
        if sid is None:
            return
        run = self._registry.by_session(sid)
        if run is not None:
            run.touch()
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

    def _report_progress(self, run: Run) -> None:
        """Tell the listeners the run's new tool call count (the store keeps a run's progress
        only when its turn ends), while the run is still followed."""
        if self._registry.get(run.task_id) is not run:
            return
        self._recorder.emit(
            "task.updated", run.task.model_copy(update={"progress": run.progress.model_copy()})
        )


async def abort_quietly(backend: SessionBackend, session_id: str) -> None:
    """Abort a session's run; a failure is logged (the run may be over already)."""
    try:
        await backend.abort(session_id)
    except BackendError as exc:
        log.warning("abort of %s failed: %s", session_id, exc)
