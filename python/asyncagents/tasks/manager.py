"""`TaskManager`: background sub-agent tasks over a `SessionBackend`, kept in a `TaskStore`.

Every public call returns at once (except ``output(block=True)``); runs go on in the server.
Completion is proven from the messages (see `turns.read_turn`), woken by events, and re-checked
by a periodic reconciliation and after every event-stream reconnect, so a lost event costs at
most one poll interval. Every state change is a compare-and-set on the stored record, so a late
completion can never overwrite a cancel or a newer resume turn.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

from .backend import JSON, PromptRequest, SessionBackend
from .errors import (
    BackendError,
    ForkResumeConflictError,
    SessionExpiredError,
    SessionNotFoundError,
    TaskBeingResumedError,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskRequestError,
)
from .events import EventFollower, event_properties, event_session_id, event_type
from .models import Notice, NoticeKind, OutputResult, Task, TaskProgress, TaskStatus, new_id, now_ms
from .notices import NoticeCourier, format_notice
from .store import SQLiteTaskStore, TaskStore
from .tools import DEFAULT_OUTPUT_TIMEOUT_SECONDS, disabled_tools
from .turns import TurnState, format_error, read_turn

log = logging.getLogger(__name__)

ACTIVE = (TaskStatus.RUNNING, TaskStatus.RESUMED)

STALLED = (
    "The task's run stopped without finishing: its session is idle on the server but the turn "
    "has no final reply (the OpenCode server was probably restarted during the run). Start a new "
    "asyncagents_task to try again."
)


class ForkContextLike(Protocol):
    """What the fork step needs from `asyncagents.build_fork_context`'s result."""

    @property
    def text(self) -> str: ...

    @property
    def stats(self) -> Any: ...


ForkBuilder = Callable[[bytes], ForkContextLike]


def default_store_path() -> Path:
    """``$ASYNCAGENTS_TASKS_DB``, else ``$XDG_STATE_HOME/asyncagents/tasks.sqlite3``."""
    env = os.environ.get("ASYNCAGENTS_TASKS_DB")
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "asyncagents" / "tasks.sqlite3"


def _default_fork_builder(raw: bytes) -> ForkContextLike:
    """The fork pipeline, imported on first use (it loads the Rust extension)."""
    from asyncagents import build_fork_context

    ctx: ForkContextLike = build_fork_context(raw)
    return ctx


def _stats_dict(stats: Any) -> dict[str, Any] | None:
    dump = getattr(stats, "model_dump", None)
    if callable(dump):
        out: dict[str, Any] = dump(mode="json")
        return out
    return dict(stats) if isinstance(stats, dict) else None


class TaskManager:
    """Launch, watch, resume, cancel and clear background tasks of parent sessions.

    Use ``async with TaskManager(backend) as manager`` (or `start()` / `close()`): starting
    re-attaches to tasks a previous manager left running in the same store, follows the event
    stream, reconciles every `poll_interval` seconds and retries undelivered notices.

    A turn that has not ended but whose session showed no sign of life (no event, not busy in
    ``/session/status``) for `stall_timeout` seconds was lost by the server (a restart drops
    the run and leaves its last message unfinished forever): it ends in ``error``.
    """

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore | None = None,
        *,
        poll_interval: float = 5.0,
        stall_timeout: float = 60.0,
        notice_retry_initial: float = 1.0,
        notice_retry_max: float = 60.0,
        notify_parent: bool = True,
        wait_for_idle_parent: bool = True,
        model: dict[str, str] | None = None,
        fork_builder: ForkBuilder | None = None,
        follow_events: bool = True,
    ) -> None:
        self.backend = backend
        self.store: TaskStore = (
            store if store is not None else SQLiteTaskStore(default_store_path())
        )
        self.poll_interval = poll_interval
        self.stall_timeout = stall_timeout
        self.notify_parent = notify_parent
        self.model = model
        self._fork_builder = fork_builder or _default_fork_builder
        self.courier = NoticeCourier(
            backend,
            self.store,
            retry_initial=notice_retry_initial,
            retry_max=notice_retry_max,
            wait_while_busy=wait_for_idle_parent,
        )
        self.events = EventFollower(backend, self._on_event, on_connect=self._on_connect)
        self._follow_events = follow_events
        self._bg: set[asyncio.Task[Any]] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._checks_pending: set[str] = set()
        #: child session id -> task id, for the tasks running now
        self._active: dict[str, str] = {}
        #: child session id -> first session.error of the running turn (the reason)
        self._session_errors: dict[str, str] = {}
        self._progress: dict[str, TaskProgress] = {}
        #: child session id -> monotonic time it last showed life (an event, or busy status)
        self._alive: dict[str, float] = {}
        self._changed: asyncio.Condition | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._started = False
        self.completions = 0

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> TaskManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Re-attach to stored running tasks, follow events, start the periodic loops."""
        if self._started:
            return
        self._started = True
        self._changed = asyncio.Condition()
        for task in self.store.list_tasks(statuses=ACTIVE):
            if task.session_id is None or task.turn_started_at is None:
                # the previous manager died between accepting and starting the turn
                self._finish(
                    task.id,
                    task.turn,
                    TaskStatus.ERROR,
                    error=(
                        "The task manager restarted before this task's prompt was sent; start it "
                        "again with asyncagents_task."
                    ),
                )
                continue
            self._follow(task)
        if self._follow_events:
            self.events.start()
        self._loops.append(asyncio.get_running_loop().create_task(self._reconcile_loop()))
        self._loops.append(asyncio.get_running_loop().create_task(self._notice_loop()))
        self.reconcile()

    async def close(self) -> None:
        """Stop watching (tasks keep running in the server; a new manager re-attaches)."""
        if not self._started:
            return
        self._started = False
        await self.events.stop()
        for loop in self._loops:
            loop.cancel()
        pending = [*self._loops, *self._bg]
        for job in self._bg:
            job.cancel()
        for job in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
        self._loops.clear()
        self._bg.clear()

    async def aclose(self) -> None:
        """Close the manager, its store and its backend."""
        await self.close()
        await self.backend.aclose()
        self.store.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        job = asyncio.get_running_loop().create_task(coro)
        self._bg.add(job)
        job.add_done_callback(self._bg.discard)
        return job

    def _lock(self, task_id: str) -> asyncio.Lock:
        lock = self._locks.get(task_id)
        if lock is None:
            lock = self._locks[task_id] = asyncio.Lock()
        return lock

    async def _notify_changed(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def _get(self, task_id: str, parent_session_id: str | None) -> Task:
        task = self.store.get(task_id)
        if task is None or (
            parent_session_id is not None and task.parent_session_id != parent_session_id
        ):
            raise TaskNotFoundError(task_id)
        return task

    # -- public API ---------------------------------------------------------------------------

    async def task(
        self,
        parent_session_id: str,
        prompt: str,
        agent: str,
        description: str,
        fork: bool = False,
        resume: str | None = None,
    ) -> Task:
        """Launch a task (or resume one) and return it at once, status running / resumed.

        The child session is created here (so a down server fails this call); the fork
        context, the injection and the prompt run in the background. A failure there ends the
        task in ``error`` with the reason, and the parent is told.
        """
        await self.start()
        if fork and resume:
            raise ForkResumeConflictError()
        if not prompt or not prompt.strip():
            raise TaskRequestError("prompt is empty: give the sub-agent its full instructions.")
        if resume:
            return await self._resume(parent_session_id, resume, prompt)
        if not agent:
            raise TaskRequestError("agent is required for a new task.")
        description = description.strip() or prompt.strip().splitlines()[0][:60]
        session = await self.backend.create_session(
            parent_id=parent_session_id, title=f"{description} (@{agent} subagent)"
        )
        task = Task(
            id=new_id("tsk"),
            parent_session_id=parent_session_id,
            session_id=str(session["id"]),
            prompt=prompt,
            last_prompt=prompt,
            agent=agent,
            description=description,
            is_forked=fork,
        )
        self.store.put(task)
        self._follow(task)
        self._spawn(self._launch(task))
        return task

    async def output(
        self,
        task_id: str,
        block: bool = False,
        timeout: float = DEFAULT_OUTPUT_TIMEOUT_SECONDS,
        parent_session_id: str | None = None,
    ) -> OutputResult:
        """Status and result; with `block`, wait up to `timeout` s for the current turn to end.

        Reading an ended task records `result_retrieved_at`. A running task gets fresh
        progress from its messages.
        """
        await self.start()
        task = self._get(task_id, parent_session_id)
        waited = 0.0
        timed_out = False
        if block and task.status.active:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            timed_out = not await self._wait_ended(task_id, timeout)
            waited = loop.time() - begin
            task = self._get(task_id, parent_session_id)
        if task.status.active:
            task.progress = await self._fresh_progress(task)
        elif task.result_retrieved_at is None:
            marked = self.store.update(task_id, _mark_retrieved(task.turn))
            if marked is not None:
                task = marked[0]
        return OutputResult(task=task, timed_out=timed_out, waited_seconds=waited)

    async def list(
        self, parent_session_id: str, status: TaskStatus | None = None
    ) -> builtins.list[Task]:
        """The caller's own tasks, newest first."""
        return self.store.list_tasks(parent_session_id, None if status is None else (status,))

    async def cancel(self, task_id: str, parent_session_id: str | None = None) -> Task:
        """Cancel a running (or resumed) task: mark it cancelled, then abort its session."""
        await self.start()
        task = self._get(task_id, parent_session_id)

        def mutate(t: Task) -> tuple[Task, Notice | None] | None:
            if not t.status.active:
                return None
            t.status = TaskStatus.CANCELLED
            t.completed_at = t.updated_at = now_ms()
            t.error = "cancelled by the parent"
            return t, None

        out = self.store.update(task_id, mutate)
        if out is None:
            current = self.store.get(task_id)
            raise TaskNotRunningError(task_id, (current or task).status.value)
        task = out[0]
        self._unfollow(task)
        if task.session_id:
            await self._abort(task.session_id)
        await self._notify_changed()
        return task

    async def clear(self, parent_session_id: str) -> builtins.list[Task]:
        """Remove every task of a parent (and its pending notices); abort those still running."""
        removed = self.store.delete_parent(parent_session_id)
        for task in removed:
            self._unfollow(task)
        await asyncio.gather(
            *(self._abort(t.session_id) for t in removed if t.status.active and t.session_id)
        )
        await self._notify_changed()
        return removed

    def reconcile(self) -> None:
        """Schedule a check of every running task now (also done periodically)."""
        for task_id in list(self._active.values()):
            self._schedule_check(task_id)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no background job (launch, check, delivery) is in flight (for tests)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._bg and loop.time() < end:
            await asyncio.wait(set(self._bg), timeout=end - loop.time())

    # -- launching ----------------------------------------------------------------------------

    def _request(self, task: Task, text: str) -> PromptRequest:
        return PromptRequest(text=text, agent=task.agent, tools=disabled_tools(), model=self.model)

    async def _launch(self, task: Task) -> None:
        """Fork context (when asked), then the prompt; any failure ends the task in error."""
        assert task.session_id is not None
        step = "launch"
        try:
            after: str | None = None
            if task.is_forked:
                step = "fork: reading the parent's messages"
                raw = await self.backend.messages_raw(task.parent_session_id)
                step = "fork: building the context"
                ctx = await asyncio.to_thread(self._fork_builder, raw)
                stats = _stats_dict(ctx.stats)
                if ctx.text:
                    step = "fork: injecting the context"
                    injected = await self.backend.prompt(
                        task.session_id,
                        self._request(task, ctx.text).model_copy(update={"no_reply": True}),
                    )
                    after = str(injected["info"]["id"])

                def save_stats(t: Task) -> tuple[Task, Notice | None] | None:
                    t.fork_stats = stats
                    return t, None

                self.store.update(task.id, save_stats)
            step = "sending the prompt"
            await self._start_turn(task, task.prompt, after)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("task %s failed at %s: %s", task.id, step, exc)
            self._finish(task.id, task.turn, TaskStatus.ERROR, error=f"{step} failed: {exc}")

    async def _start_turn(self, task: Task, text: str, after: str | None) -> None:
        """prompt_async, then record that the turn runs (and check once: it may be over)."""
        assert task.session_id is not None
        await self.backend.prompt_async(task.session_id, self._request(task, text))
        turn = task.turn

        def started(t: Task) -> tuple[Task, Notice | None] | None:
            if t.turn != turn or not t.status.active:
                return None
            t.turn_after_message_id = after
            t.turn_started_at = t.updated_at = now_ms()
            return t, None

        if self.store.update(task.id, started) is None:
            # cancelled or cleared while we were starting it: stop the run we just began
            await self._abort(task.session_id)
            return
        self._schedule_check(task.id)

    async def _resume(self, parent_session_id: str, task_id: str, prompt: str) -> Task:
        task = self._get(task_id, parent_session_id)
        if task.status is TaskStatus.RESUMED:
            raise TaskBeingResumedError(task_id)
        if task.status is not TaskStatus.COMPLETED:
            raise TaskNotCompletedError(task_id, task.status.value)
        if not task.session_id:
            raise SessionExpiredError(task_id, None)
        try:
            await self.backend.get_session(task.session_id)
            last = await self.backend.messages(task.session_id, limit=1)
        except SessionNotFoundError:
            raise SessionExpiredError(task_id, task.session_id) from None
        after = str(last[-1]["info"]["id"]) if last else None

        def resumed(t: Task) -> tuple[Task, Notice | None] | None:
            if t.status is not TaskStatus.COMPLETED:
                return None
            t.status = TaskStatus.RESUMED
            t.resume_count += 1
            t.turn += 1
            t.last_prompt = prompt
            t.turn_after_message_id = after
            t.turn_started_at = None
            t.result_retrieved_at = None
            t.error = None
            t.progress = TaskProgress()
            t.updated_at = now_ms()
            return t, None

        out = self.store.update(task_id, resumed)
        if out is None:
            current = self._get(task_id, parent_session_id)
            if current.status is TaskStatus.RESUMED:
                raise TaskBeingResumedError(task_id)
            raise TaskNotCompletedError(task_id, current.status.value)
        task = out[0]
        self._follow(task)
        self._spawn(self._resume_turn(task, prompt, after))
        return task

    async def _resume_turn(self, task: Task, prompt: str, after: str | None) -> None:
        try:
            await self._start_turn(task, prompt, after)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._finish(task.id, task.turn, TaskStatus.ERROR, error=f"resume failed: {exc}")

    async def _abort(self, session_id: str) -> None:
        try:
            await self.backend.abort(session_id)
        except BackendError as exc:
            log.warning("abort of %s failed: %s", session_id, exc)

    # -- completion ---------------------------------------------------------------------------

    def _schedule_check(self, task_id: str) -> None:
        if task_id in self._checks_pending or not self._started:
            return
        self._checks_pending.add(task_id)
        self._spawn(self._check(task_id))

    async def _check(self, task_id: str) -> None:
        """Prove from the messages whether the task's turn has ended; finish it if so."""
        async with self._lock(task_id):
            self._checks_pending.discard(task_id)
            task = self.store.get(task_id)
            if task is None or not task.status.active or task.session_id is None:
                return
            if task.turn_started_at is None:
                return
            sid = task.session_id
            state = await self._read_turn(task)
            if state is None:
                return
            if state.done:
                self._end_turn(task, state)
                return
            error = self._session_errors.get(sid)
            if error is None and not self._quiet_too_long(sid):
                return
            # an error seen, or quiet too long: the session's status decides
            try:
                busy = sid in await self.backend.status()
            except BackendError:
                return
            if busy:
                self._alive[sid] = time.monotonic()
                return
            # the turn may have ended between the read above and the status: read it again
            state = await self._read_turn(task)
            if state is None:
                return
            if state.done:
                self._end_turn(task, state)
            elif error is not None:
                # an error before any assistant message (bad agent/model...)
                self._finish(task.id, task.turn, TaskStatus.ERROR, error=error)
            else:
                self._finish(
                    task.id,
                    task.turn,
                    TaskStatus.ERROR,
                    error=STALLED,
                    text=state.text or None,
                    progress=state.progress,
                )

    async def _read_turn(self, task: Task) -> TurnState | None:
        """The current turn as the messages show it; None when the check must wait or stop."""
        assert task.session_id is not None
        try:
            messages = await self.backend.messages(task.session_id)
        except SessionNotFoundError:
            await self._session_gone(task)
            return None
        except BackendError as exc:
            log.info("check of %s postponed: %s", task.id, exc)
            return None
        state = read_turn(messages, task.turn_after_message_id)
        self._progress[task.id] = state.progress
        return state

    def _end_turn(self, task: Task, state: TurnState) -> None:
        """Finish a task whose turn the messages prove ended: its reply, or its error."""
        self._finish(
            task.id,
            task.turn,
            TaskStatus.COMPLETED if state.error is None else TaskStatus.ERROR,
            error=state.error,
            text=state.text,
            progress=state.progress,
        )

    def _quiet_too_long(self, sid: str) -> bool:
        """No sign of life (event, busy status) from the session for `stall_timeout` s; the
        clock starts at the first check of the run."""
        now = time.monotonic()
        return now - self._alive.setdefault(sid, now) >= self.stall_timeout

    def _finish(
        self,
        task_id: str,
        turn: int,
        status: TaskStatus,
        *,
        text: str | None = None,
        error: str | None = None,
        progress: TaskProgress | None = None,
    ) -> None:
        """End a turn once (compare-and-set on turn and status) and queue its notice with it."""
        notify = self.notify_parent

        def mutate(t: Task) -> tuple[Task, Notice | None] | None:
            if t.turn != turn or not t.status.active:
                return None
            resumed = t.status is TaskStatus.RESUMED
            t.status = status
            t.result = text if status is TaskStatus.COMPLETED else (text or None)
            t.error = error
            t.completed_at = t.updated_at = now_ms()
            t.result_retrieved_at = None
            if progress is not None:
                t.progress = progress
            if status is TaskStatus.ERROR:
                kind = NoticeKind.ERROR
            else:
                kind = NoticeKind.RESUME_COMPLETED if resumed else NoticeKind.COMPLETED
            if not notify:
                return t, None
            notice_id = new_id("ntc")
            notice = Notice(
                id=notice_id,
                task_id=t.id,
                parent_session_id=t.parent_session_id,
                kind=kind,
                turn=t.turn,
                text=format_notice(notice_id, t, kind),
            )
            return t, notice

        out = self.store.update(task_id, mutate)
        if out is None:
            return
        task, notice = out
        self.completions += 1
        self._unfollow(task)
        if self._started:
            self._spawn(self._notify_changed())
            if notice is not None:
                self._spawn(self._deliver_parent(notice.parent_session_id))

    async def _wait_ended(self, task_id: str, timeout: float) -> bool:
        """True when the task's current turn ended within `timeout` s."""
        assert self._changed is not None, "start() the manager first"
        cond = self._changed
        first = self.store.get(task_id)
        if first is None:
            return True
        turn = first.turn

        def ended() -> bool:
            t = self.store.get(task_id)
            return t is None or t.turn != turn or not t.status.active

        try:
            async with cond:
                await asyncio.wait_for(cond.wait_for(ended), timeout)
            return True
        except asyncio.TimeoutError:
            return ended()

    def _follow(self, task: Task) -> None:
        """Follow a run of `task` (launch, resume, restart): events of its session map to it,
        and the run's first error and liveness clock start afresh."""
        assert task.session_id is not None
        self._active[task.session_id] = task.id
        self._session_errors.pop(task.session_id, None)
        self._alive.pop(task.session_id, None)

    def _unfollow(self, task: Task) -> None:
        """Forget the run of `task` (ended, cancelled or cleared)."""
        if task.session_id:
            if self._active.get(task.session_id) == task.id:
                del self._active[task.session_id]
            self._session_errors.pop(task.session_id, None)
            self._alive.pop(task.session_id, None)
        self._progress.pop(task.id, None)

    async def _fresh_progress(self, task: Task) -> TaskProgress:
        if task.session_id and task.turn_started_at is not None:
            try:
                messages = await self.backend.messages(task.session_id)
                return read_turn(messages, task.turn_after_message_id).progress
            except BackendError:
                pass
        return self._progress.get(task.id, task.progress)

    # -- notices ------------------------------------------------------------------------------

    async def _deliver_parent(self, parent_session_id: str, force: bool = False) -> None:
        try:
            await self.courier.deliver_due(parent_session_id=parent_session_id, force=force)
        except Exception:
            log.exception("notice delivery to %s failed", parent_session_id)
        await self._clear_gone_parents()

    async def _clear_gone_parents(self) -> None:
        while not self.courier.gone_parents.empty():
            await self.clear(self.courier.gone_parents.get_nowait())

    # -- events and loops ---------------------------------------------------------------------

    def _on_event(self, event: JSON) -> None:
        kind = event_type(event)
        if kind in ("server.heartbeat", "server.connected"):
            return
        if kind == "message.part.delta":
            sid = event_properties(event).get("sessionID")
            if isinstance(sid, str) and sid in self._active:
                self._alive[sid] = time.monotonic()
            return
        sid = event_session_id(event)
        if sid is None:
            return
        task_id = self._active.get(sid)
        if task_id is not None:
            self._alive[sid] = time.monotonic()
        if kind == "session.idle" or (
            kind == "session.status"
            and (event_properties(event).get("status") or {}).get("type") == "idle"
        ):
            if task_id is not None:
                self._schedule_check(task_id)
            # a parent that went idle can take its waiting notices now
            self._spawn(self._deliver_parent(sid, force=True))
        elif kind == "session.error":
            if task_id is not None:
                _, text = format_error(event_properties(event).get("error"))
                # the first error of a turn is the reason; OpenCode may follow it with a
                # generic one carrying a stack trace (unknown agent or model)
                self._session_errors.setdefault(sid, text)
                self._schedule_check(task_id)
        elif kind == "session.deleted":
            self._spawn(self._session_deleted(sid))
        elif kind == "message.part.updated" and task_id is not None:
            part = event_properties(event).get("part")
            if isinstance(part, dict) and part.get("type") == "tool":
                progress = self._progress.setdefault(task_id, TaskProgress())
                progress.last_tool = str(part.get("tool") or "unknown")
                progress.last_activity_at = now_ms()

    async def _session_deleted(self, session_id: str) -> None:
        """A deleted child ends its task in error; a deleted parent clears its tasks."""
        task = self.store.find_by_session(session_id)
        if task is not None and task.status.active:
            await self._session_gone(task)
        if self.store.list_tasks(session_id):
            await self.clear(session_id)

    async def _session_gone(self, task: Task) -> None:
        """The child session of an active task was deleted: end the task, stop its run.

        OpenCode keeps running a deleted session's turn (deleting a parent deletes its children
        the same way), and only an abort stops it.
        """
        self._finish(
            task.id,
            task.turn,
            TaskStatus.ERROR,
            error="The task's session was deleted before it finished.",
        )
        if task.session_id:
            await self._abort(task.session_id)

    async def _on_connect(self) -> None:
        """After every (re)connection: re-check what may have been missed."""
        self.reconcile()
        await self._deliver_all_due()

    async def _deliver_all_due(self) -> None:
        try:
            await self.courier.deliver_due()
        except Exception:
            log.exception("notice delivery failed")
        await self._clear_gone_parents()

    async def _reconcile_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            self.reconcile()

    async def _notice_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.poll_interval, self.courier_interval))
            await self._deliver_all_due()

    @property
    def courier_interval(self) -> float:
        """How often pending notices are looked at."""
        return 1.0


def _mark_retrieved(turn: int) -> Callable[[Task], tuple[Task, Notice | None] | None]:
    def mutate(t: Task) -> tuple[Task, Notice | None] | None:
        if t.turn != turn or t.status.active or t.result_retrieved_at is not None:
            return None
        t.result_retrieved_at = now_ms()
        return t, None

    return mutate
