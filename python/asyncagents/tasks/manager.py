"""`TaskManager`: background sub-agent tasks over a `SessionBackend`, kept in a `TaskStore`.

The manager is a facade: each public call validates, stores, and hands the slow part to one of
its named parts, each in its own module:

- `transitions`: every state change as a pure compare-and-set `Mutation`;
- `recorder.Recorder`: applies them, tells listeners, wakes waiters, queues notices;
- `registry.RunRegistry`: the turns this manager follows now (one `Run` each);
- `admitter.Admitter`: starts queued tasks when the caps let them (`admission` decides which);
- `launcher.Launcher`: fork context and injection when asked, prompt when admitted;
- `watcher.Watcher`: events, completion checks, stall detection, periodic reconciliation;
- `notices.NoticeCourier`: claims and delivers the parents' notices, exactly once;
- `ownership.LeaseKeeper`: this manager's lease, and takeovers of dead managers' tasks.

Every public call returns at once (except ``output(block=True)``); runs go on in the server.
A new task (and a follow-up) is queued, and starts as soon as every cap of the config allows
(`max_running` and the others, counted over every manager of the backend); most start at once.
Managers sharing a store work side by side: each works for one backend (`backend_name`) and
never touches another backend's tasks; a task is followed by the manager that admitted (or took
over) it; any manager of the backend may admit, read, cancel, clear or resume it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import Collection
from dataclasses import dataclass

from ..locations import default_store_path
from .admission import Caps, QueuePlace, place_of
from .admitter import Admitter
from .backend import JSON, SessionBackend
from .catalog import ModelCatalog, model_name
from .config import TaskManagerConfig
from .conversation import select_messages
from .errors import (
    AmbiguousTaskIdError,
    BackendError,
    ForkResumeConflictError,
    QueueFullError,
    SessionExpiredError,
    SessionNotFoundError,
    StoreError,
    TaskBeingResumedError,
    TaskDepthError,
    TaskNotCompletedError,
    TaskNotFoundError,
    TaskNotRunningError,
    TaskRequestError,
    TreeBudgetSpentError,
)
from .guards import checked_limits
from .jobs import Jobs
from .launcher import (
    ForkBuilder,
    ForkContextLike,
    Launcher,
    default_fork_builder,
    with_session,
)
from .launcher import created_ms as _created_ms
from .launcher import new_token as _token
from .models import (
    FollowUp,
    OutputResult,
    Task,
    TaskChange,
    TaskLimits,
    TaskStatus,
    message_id_after,
    new_id,
)
from .notices import NoticeCourier
from .ownership import LeaseKeeper
from .queries import TOP_DEFAULT, SortField, TaskChanges, TaskPage, TaskQuery, TaskStats
from .recorder import Listener, Recorder
from .registry import Run, RunRegistry
from .session_titles import SessionTitles
from .store import PENDING_STATUSES, SQLiteTaskStore, TaskStore
from .tool_names import DEFAULT_OUTPUT_TIMEOUT_SECONDS
from .transitions import (
    MAX_QUEUED_FOLLOWUPS,
    between_turns,
    cancelled,
    queue_followup,
    resumed,
    resumed_queued,
    retrieved,
    started,
)
from .turns import turn_messages
from .usage import usd
from .watcher import STALLED, Watcher, abort_quietly

__all__ = [
    "STALLED",
    "ForkBuilder",
    "ForkContextLike",
    "TaskManager",
    "TaskMessages",
    "default_backend_name",
    "default_store_path",
]

log = logging.getLogger(__name__)

#: changes after which a queued task may start: a turn ended (a cancel and a clear admit once
#: their sessions' runs are aborted, so the server never runs one over a cap)
_SLOT_FREEING = frozenset({"task.completed", "task.error"})
#: how many candidates an ambiguous id prefix names
PREFIX_CANDIDATES = 5


@dataclass(frozen=True)
class TaskMessages:
    """What `TaskManager.read_messages` read: the task, the chosen messages, and how many
    messages its session holds in all."""

    task: Task
    messages: list[JSON]
    total: int


def default_backend_name(backend: SessionBackend) -> str:
    """The name the backend declares (its ``name`` attribute), else its ``base_url``, else a
    name unique to this backend object.

    Managers with one backend name share tasks: they adopt each other's, and clear the ones
    whose parent their backend says is gone. So a name must only be shared by backends that
    see the same sessions: an OpenCode server's URL (`OpenCodeBackend.name`), never an
    in-process backend's (`InProcessBackend.name` is unique to the object, as only it holds
    its sessions). A backend without a name is treated the same way.
    """
    for attribute in ("name", "base_url"):
        value = getattr(backend, attribute, None)
        if isinstance(value, str) and value:
            return value
    return f"{type(backend).__name__.lower()}:{os.urandom(8).hex()}"


class TaskManager:
    """Launch, watch, resume, cancel and clear background tasks of parent sessions.

    Use ``async with TaskManager(backend, store, config) as manager`` (or `start()` /
    `close()`): starting opens the store, takes this manager's lease, adopts the tasks of its
    backend that no live manager follows (a previous run of the application, a killed worker),
    follows the event stream, reconciles every ``poll_interval`` seconds and delivers notices.
    """

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore | None = None,
        config: TaskManagerConfig | None = None,
        *,
        fork_builder: ForkBuilder | None = None,
    ) -> None:
        self.config = config if config is not None else TaskManagerConfig()
        self.backend = backend
        self.store: TaskStore = (
            store if store is not None else SQLiteTaskStore(default_store_path())
        )
        self.backend_name = self.config.backend_name or default_backend_name(backend)
        self.instance_id = self.config.instance_id or new_id("mgr")
        self.registry = RunRegistry()
        self.jobs = Jobs()
        #: launches and follow-ups whose prompt is being sent; a graceful close waits for them
        self.launches = Jobs()
        self.courier = NoticeCourier(
            backend,
            self.store,
            self.config,
            owner=self.instance_id,
            backend_name=self.backend_name,
            running_tasks=self._running_tasks,
            on_parent_gone=self.clear,
        )
        self.recorder = Recorder(
            self.store, self.registry, self.config, on_notice=lambda _: self.courier.poke()
        )
        self.watcher = Watcher(
            backend,
            self.store,
            self.registry,
            self.recorder,
            self.config,
            self.jobs,
            owner=self.instance_id,
            on_parent_idle=lambda _: self.courier.poke(),
            on_session_deleted=self._session_deleted,
            on_connect=self.courier.poke,
        )
        self.events = self.watcher.events
        #: the server's models, for the `model` of a task and the fork's budget
        self.catalog = ModelCatalog(backend, self.config.allowed_models, self.config.models_ttl)
        #: parent sessions' titles, for the dashboard (bounded, expiring, never an error)
        self.titles = SessionTitles(backend)
        self.launcher = Launcher(
            backend,
            self.store,
            self.recorder,
            self.watcher,
            self.config,
            fork_builder or default_fork_builder,
            self.catalog,
        )
        self.admitter = Admitter(
            self.store,
            Caps.from_config(self.config),
            backend_name=self.backend_name,
            owner=self.instance_id,
            interval=self.config.admission_interval,
            fresh_ms=round(self.config.lease_ttl * 1000),
            on_admitted=self._admitted,
        )
        self.recorder.add_listener(self._on_change)
        #: new tasks being prepared in this process (their session, their fork), by task id
        self._preparing: dict[str, asyncio.Task[None]] = {}
        #: tasks being created by `task` whose ``task.created`` was not told yet, and those of
        #: them another pass of this manager admitted (for `task` to return)
        self._creating: set[str] = set()
        self.watcher.on_followup = self._followup_due
        self._created: dict[str, Task] = {}
        self.leases = LeaseKeeper(
            self.store,
            owner=self.instance_id,
            backend_name=self.backend_name,
            lease_ttl=self.config.lease_ttl,
            on_taken=self._adopt,
        )
        delete = self.config.delete_cleared_sessions
        self._delete_cleared = (
            delete if delete is not None else getattr(backend, "sessions_private", False)
        )
        self._start_lock = asyncio.Lock()
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> TaskManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the store, take the lease and adopt orphaned tasks, start the loops."""
        async with self._start_lock:
            if self._started:
                return
            await self.store.open()
            self._started = True
            try:
                self.watcher.start()
                await self.leases.start()
            except BaseException:
                # a store failing at the first lease: leave nothing running, start again later
                self._started = False
                await self.leases.stop(drop_lease=False)
                await self.watcher.stop()
                await self.jobs.cancel_all()
                raise
            self.courier.start()
            self.admitter.start()
            self.watcher.reconcile()

    async def close(self) -> None:
        """Stop watching and drop the lease: tasks keep running in the server, and another
        manager of the backend (or the next start) takes them over at once.

        Prompts being sent are waited for first, up to ``drain_timeout`` seconds; a send cut off
        after that is sent again by the next owner, with the same message id (so once)."""
        async with self._start_lock:
            if not self._started:
                return
            await self.admitter.stop()  # no new admission while draining
            await self.launches.wait_idle(self.config.drain_timeout)
            self._started = False
            await self.leases.stop(drop_lease=False)
            await self.watcher.stop()
            await self.courier.stop()
            await self.launches.cancel_all()
            await self.jobs.cancel_all()
            for run in self.registry:
                self.registry.drop(run.task_id)
            await self.leases.stop(drop_lease=True)

    async def aclose(self) -> None:
        """Close the manager, its store and its backend."""
        await self.close()
        await self.backend.aclose()
        await self.store.close()

    def add_listener(self, callback: Listener) -> None:
        """Call `callback(TaskChange)` after every stored change of a task by this manager
        (synchronously, on the loop: it must not block)."""
        self.recorder.add_listener(callback)

    def remove_listener(self, callback: Listener) -> None:
        """Stop calling `callback` (nothing if it was not added)."""
        self.recorder.remove_listener(callback)

    @property
    def completions(self) -> int:
        """Turns this manager saw end (for benchmarks)."""
        return self.recorder.completions

    # -- public API ---------------------------------------------------------------------------

    async def task(
        self,
        parent_session_id: str,
        prompt: str,
        agent: str | None = None,
        description: str | None = None,
        fork: bool = False,
        resume: str | None = None,
        limits: TaskLimits | None = None,
        *,
        model: str | None = None,
        fork_turns: int | None = None,
        when: str | None = None,
    ) -> Task:
        """Launch a task (or resume one, by id or unique id prefix) and return it at once.

        `limits` lower the config's runaway guards for this task (a value above the config's
        is refused with a `TaskRequestError`). `model` (``provider/model``) must be one the
        server offers and ``allowed_models`` allows (else `ModelRefusedError` names those
        allowed); without it the child runs on the configured ``model``, else the server's
        default. `fork_turns` keeps only the parent's last N user turns in a fork. With
        `resume`, `when` sends a follow-up to a running task: ``"after_current"`` stores it
        until the running turn ends, ``"now"`` aborts the running turn for it; a queued
        follow-up is the next resume, with its own notice.

        The task is stored, queued, here (a failing store raises a `StoreError`, and nothing
        is left behind), then admitted at once if every cap allows: the task returned is
        ``running``, or ``queued`` (`queue_place` says where). Its child session is created in
        the background right after (`session_id` is None until then; the task id is the
        handle), then a forked task's context is built and injected, and the prompt is sent
        once the task is admitted. A failure there (a down server too) ends the task in
        ``error`` with the reason, and the parent is told. After a session creation that could
        not reach the server, the next call creates its session before returning, and raises
        that `BackendError` (storing nothing) while the server stays unreachable. A parent with
        ``max_queued_per_parent`` tasks queued gets `QueueFullError`; a session ``max_depth``
        deep in a tree of tasks gets `TaskDepthError`.
        """
        await self.start()
        if fork and resume:
            raise ForkResumeConflictError()
        if not prompt or not prompt.strip():
            raise TaskRequestError("prompt is empty: give the sub-agent its full instructions.")
        asked = checked_limits(self.config, limits)
        if resume and (model is not None or fork_turns is not None):
            raise TaskRequestError(
                "model and fork_turns apply to a new task; a resumed task keeps its model and "
                "its history. Call asyncagents_task again without them."
            )
        if fork_turns is not None and not fork:
            raise TaskRequestError(
                "fork_turns applies only with fork=true. Call asyncagents_task again with "
                "fork=true, or without fork_turns."
            )
        if fork_turns is not None and fork_turns < 1:
            raise TaskRequestError('fork_turns must be "all" or a whole number of at least 1.')
        if when is not None and when not in ("after_current", "now"):
            raise TaskRequestError('when must be "after_current" or "now".')
        if when is not None and not resume:
            raise TaskRequestError(
                "when applies only to a follow-up: give resume=<task id> with it, or leave it out."
            )
        if resume:
            return await self._resume(parent_session_id, resume, prompt, limits, when)
        if not agent:
            raise TaskRequestError("agent is required for a new task.")
        if model is not None:
            await self.catalog.check(model)
        else:
            model = model_name(self.config.model)
        if self.config.fallback_models:
            await self.catalog.check_fallbacks(self.config.fallback_models)
        description = (description or "").strip() or prompt.strip().splitlines()[0][:60]
        depth, root = await self._depth_of(parent_session_id)
        await self._check_tree_budget(root)
        task = Task(
            id=new_id("tsk"),
            parent_session_id=parent_session_id,
            prompt=prompt,
            last_prompt=prompt,
            agent=agent,
            description=description,
            is_forked=fork,
            model=model,
            fork_turns=fork_turns,
            backend=self.backend_name,
            owner=self.instance_id,
            status=TaskStatus.QUEUED,
            fork_pending=fork,
            depth=depth,
            root_session_id=root,
            limits=asked,
        )
        if self.launcher.unreachable or getattr(self.backend, "refusing", False) is True:
            # the server could not be reached lately, or refused our credentials: hear of it
            # now rather than in a notice
            task = with_session(task, await self.launcher.new_session(task))
        try:
            await self.store.insert(task)
        except BaseException as exc:
            if task.session_id:
                # no task to follow it: the session would be left behind
                await self._drop_session(task.session_id)
            if isinstance(exc, StoreError) or not isinstance(exc, Exception):
                raise
            raise StoreError(f"storing the new task failed: {exc}") from exc
        await self._keep_queue_bound(task)
        # listeners hear of it once, as it is after its first admission: running, or queued
        self._creating.add(task.id)
        told = asyncio.Event()  # its preparation's changes come after ``task.created``
        if not task.ready:
            self._start_preparing(task, told)
        try:
            task = await self._admit_at_once(task)
            if task.id in self._creating:
                self._creating.discard(task.id)
                self.recorder.changed(task, "task.created")
        finally:
            told.set()
        # admitted by a pass that ran meanwhile: the task as that pass left it
        return self._created.pop(task.id, task)

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
        task = await self._resolve(task_id, parent_session_id)
        waited = 0.0
        timed_out = False
        if block and task.status.pending:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            while True:
                left = max(0.0, timeout - (loop.time() - begin))
                timed_out = not await self.recorder.wait_ended(task.id, left)
                task = await self._resolve(task.id, parent_session_id)
                # a try again after a provider error (waiting in the queue, then running) is
                # the same turn to the caller
                if timed_out or not task.status.pending or not task.tries:
                    break
            waited = loop.time() - begin
        if task.status.active:
            task = await self.watcher.fresh(task)
        elif task.result_retrieved_at is None:
            try:
                marked = await self.recorder.apply(task.id, retrieved(task.turn), "task.updated")
            except StoreError as exc:
                # the result is what was asked for; the mark is bookkeeping
                log.warning("could not mark %s as read: %s", task.id, exc)
                marked = None
            if marked is not None:
                task = marked[0]
        return OutputResult(task=task, timed_out=timed_out, waited_seconds=waited)

    async def messages(
        self,
        task_id: str,
        parent_session_id: str | None = None,
        *,
        full_session: bool = False,
        since_message_id: str | None = None,
        message_limit: int | None = None,
    ) -> builtins.list[JSON]:
        """The child's messages (OpenCode's ``{info, parts}``, oldest first), chosen as
        `read_messages` does; a child session that is gone raises `SessionExpiredError`."""
        try:
            read = await self.read_messages(
                task_id,
                parent_session_id,
                full_session=full_session,
                since_message_id=since_message_id,
                message_limit=message_limit,
            )
        except SessionNotFoundError:
            task = await self._resolve(task_id, parent_session_id)
            raise SessionExpiredError(task.id, task.session_id) from None
        return read.messages

    async def read_messages(
        self,
        task_id: str,
        parent_session_id: str | None = None,
        *,
        full_session: bool = False,
        since_message_id: str | None = None,
        message_limit: int | None = None,
    ) -> TaskMessages:
        """The one reader of a task's conversation: the task, the chosen messages and how many
        the session has.

        By default the current turn's messages; `full_session` the whole conversation (with an
        injected fork context); `since_message_id` those after that message of the session
        (`UnknownMessageError` if it is not one); `message_limit` only the newest that many of
        what is chosen. A child session that is gone raises `SessionNotFoundError`.
        """
        await self.start()
        if message_limit is not None and message_limit < 0:
            raise TaskRequestError("message_limit must be 0 or more.")
        task = await self._resolve(task_id, parent_session_id)
        if not task.session_id:
            return TaskMessages(task=task, messages=[], total=0)
        messages = await self.backend.messages(task.session_id)
        total = len(messages)
        if since_message_id is None and not full_session:
            messages = turn_messages(messages, task.turn_after_message_id)
        chosen = select_messages(
            messages, since_message_id=since_message_id, message_limit=message_limit
        )
        return TaskMessages(task=task, messages=chosen, total=total)

    async def list(
        self, parent_session_id: str, status: TaskStatus | None = None
    ) -> builtins.list[Task]:
        """The caller's own tasks on this backend, newest first."""
        await self.start()
        tasks = await self.store.list_tasks(
            parent_session_id, None if status is None else (status,), backend=self.backend_name
        )
        for task in tasks:
            # OpenCode retrying the provider is only in this manager's memory (from events)
            run = self.registry.get(task.id)
            if run is not None and run.turn == task.turn and run.progress.retry is not None:
                task.progress = task.progress.model_copy(update={"retry": run.progress.retry})
        return tasks

    async def get_task(
        self, task_id: str, parent_session_id: str | None = None, *, prefix: bool = True
    ) -> Task:
        """A task of this backend by id, or by unique id prefix unless `prefix` is False
        (`TaskNotFoundError` if none, `AmbiguousTaskIdError` if the prefix names several)."""
        await self.start()
        if prefix:
            return await self._resolve(task_id, parent_session_id)
        task = await self.store.get(task_id)
        if (
            task is None
            or task.backend != self.backend_name
            or (parent_session_id is not None and task.parent_session_id != parent_session_id)
        ):
            raise TaskNotFoundError(task_id)
        return task

    async def query_tasks(
        self,
        *,
        parent_session_id: str | None = None,
        statuses: Collection[TaskStatus] | None = None,
        agent: str | None = None,
        text: str | None = None,
        sort: SortField = "created_at",
        descending: bool = True,
        limit: int = 100,
        after: tuple[int, str] | None = None,
        count: bool = True,
    ) -> TaskPage:
        """One page of this backend's tasks matching every filter given, run in the store
        (`TaskQuery` says what each means); `TaskPage.next_after` is the next page's `after`."""
        await self.start()
        return await self.store.query_tasks(
            TaskQuery(
                backend=self.backend_name,
                parent_session_id=parent_session_id,
                statuses=None if statuses is None else frozenset(statuses),
                agent=agent,
                text=text,
                sort=sort,
                descending=descending,
                limit=limit,
                after=after,
                count=count,
            )
        )

    async def task_stats(
        self, parent_session_id: str | None = None, top: int = TOP_DEFAULT
    ) -> TaskStats:
        """Counts by status and agent, tool calls by name, last-turn durations and usage of this
        backend's tasks (of one parent when given), computed in the store; the usage of the
        `top` first parents and trees by cost, and how many there are."""
        await self.start()
        return await self.store.task_stats(self.backend_name, parent_session_id, top)

    async def changed_since(self, since: int) -> TaskChanges:
        """This backend's tasks written at or after `since` (epoch ms, the writers' clocks) and
        the ids of those cleared since, by any process sharing the store; an indexed read."""
        await self.start()
        return await self.store.changed_since(self.backend_name, since)

    async def cancel(
        self,
        task_id: str,
        parent_session_id: str | None = None,
        *,
        dropped: builtins.list[int] | None = None,
    ) -> Task:
        """Cancel a queued or running (or resumed) task: mark it cancelled, then abort its
        session if its turn was admitted (a queued one was never sent a prompt).

        A cancelled follow-up returns the task to ``completed`` with its last result. Queued
        follow-ups are dropped; their number is appended to `dropped`.
        """
        await self.start()
        task = await self._resolve(task_id, parent_session_id)
        out = await self.recorder.apply(task.id, cancelled(dropped), "task.cancelled")
        if out is None:
            current = await self.store.get(task.id)
            raise TaskNotRunningError(task.id, (current or task).status.value)
        task = out[0]
        if task.session_id and task.admitted_at is not None:
            await abort_quietly(self.backend, task.session_id)
        self.admitter.poke()
        return task

    async def clear(self, parent_session_id: str) -> builtins.list[Task]:
        """Remove every task of a parent on this backend (and their pending notices); abort
        those still running; delete their child sessions if ``delete_cleared_sessions``."""
        await self.start()
        removed = await self.store.delete_parent(parent_session_id, backend=self.backend_name)
        for task in removed:
            self.registry.drop(task.id)
            self.recorder.emit("task.cleared", task)
        await asyncio.gather(
            *(
                self._retire_session(t.session_id, abort=t.status.active)
                for t in removed
                if t.session_id
            )
        )
        self.recorder.poke()
        self.admitter.poke()
        return removed

    def reconcile(self) -> None:
        """Schedule a check of every followed task now (also done periodically)."""
        self.watcher.reconcile()

    async def queue_place(self, task_id: str) -> QueuePlace | None:
        """Where a queued task stands (its place, what runs, the caps that hold it back);
        None when it is not queued."""
        view = await self.store.queue_view(self.backend_name)
        return place_of(task_id, view.entries, view.last_admitted, self.admitter.caps)

    async def session_title(self, session_id: str) -> str | None:
        """A session's title as its server names it (cached a minute); None when it cannot be
        read within a few seconds, so a caller shows the id instead."""
        return await self.titles.title(session_id)

    async def tree(self, task_id: str, parent_session_id: str | None = None) -> builtins.list[Task]:
        """A task's descendants: the tasks its child started, theirs, and so on (oldest first)."""
        await self.start()
        task = await self._resolve(task_id, parent_session_id)
        if not task.session_id:
            return []
        return await self.store.descendants(task.session_id)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no background job (launch, check) is in flight (for tests)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        await self.launches.wait_idle(timeout)
        await self.jobs.wait_idle(max(0.0, end - loop.time()))

    # -- internals ----------------------------------------------------------------------------

    async def _resolve(self, task_id: str, parent_session_id: str | None) -> Task:
        """The task with this id, or the one task whose id starts with it (as git does)."""
        task = await self.store.get(task_id) if task_id else None
        if task is None and task_id.strip():
            ids = await self.store.ids_with_prefix(
                task_id, parent_session_id, limit=PREFIX_CANDIDATES
            )
            if len(ids) > 1:
                raise AmbiguousTaskIdError(task_id, ids)
            if ids:
                task = await self.store.get(ids[0])
        if (
            task is None
            or task.backend != self.backend_name
            or (parent_session_id is not None and task.parent_session_id != parent_session_id)
        ):
            raise TaskNotFoundError(task_id)
        return task

    async def _check_tree_budget(self, root: str) -> None:
        """Refuse a turn in a tree whose tasks have used up `max_cost` (it would be stopped at
        its first check)."""
        limit = self.config.max_cost
        if limit is None:
            return
        spent = await self.watcher.tree.total(root)
        if spent >= limit:
            raise TreeBudgetSpentError(root, usd(spent), usd(limit))

    async def _resume(
        self,
        parent_session_id: str,
        task_id: str,
        prompt: str,
        limits: TaskLimits | None,
        when: str | None = None,
    ) -> Task:
        task = await self._resolve(task_id, parent_session_id)
        if when is not None and (task.status.active or between_turns(task)):
            followup = FollowUp(prompt=prompt, interrupt=when == "now")
            out = await self.recorder.apply(task.id, queue_followup(followup), "task.updated")
            if out is not None:
                if followup.interrupt and out[0].status.active and task.session_id:
                    # the follow-up keeps the aborted turn's slot (`finished`)
                    await abort_quietly(self.backend, task.session_id)
                elif out[0].status is TaskStatus.QUEUED:
                    # it took the place of a turn waiting in the queue, without its backoff
                    self.admitter.poke()
                return out[0]
            task = await self._resolve(task.id, parent_session_id)
            pending = task.status.active or between_turns(task)
            if pending and len(task.pending_followups) >= MAX_QUEUED_FOLLOWUPS:
                raise TaskRequestError(
                    f"Task `{task.id}` already has {MAX_QUEUED_FOLLOWUPS} queued follow-ups; "
                    "wait for its notices before queueing more."
                )
            # else it ended meanwhile: resumed below as a completed task
        if _being_resumed(task):
            raise TaskBeingResumedError(task.id)
        if task.status is not TaskStatus.COMPLETED:
            raise TaskNotCompletedError(task.id, task.status.value)
        if not task.session_id:
            raise SessionExpiredError(task.id, None)
        await self._check_tree_budget(task.tree_id)
        try:
            session = await self.backend.get_session(task.session_id)
            last = await self.backend.messages(task.session_id, limit=1)
        except SessionNotFoundError:
            raise SessionExpiredError(task.id, task.session_id) from None
        after = str(last[-1]["info"]["id"]) if last else None
        message_id = message_id_after(after, _created_ms(session), _token())
        out = await self.recorder.apply(
            task.id,
            resumed(prompt, after, self.instance_id, message_id, limits),
            "task.resumed",
        )
        if out is None:
            current = await self._resolve(task.id, parent_session_id)
            if _being_resumed(current):
                raise TaskBeingResumedError(task.id)
            raise TaskNotCompletedError(task.id, current.status.value)
        return await self._admit_at_once(out[0])

    # -- queue --------------------------------------------------------------------------------

    async def _depth_of(self, parent_session_id: str) -> tuple[int, str]:
        """The depth and the root of a new task of `parent_session_id`; `TaskDepthError` if
        that session may not start tasks (it is a task's child ``max_depth`` deep)."""
        parent_task = await self.store.find_by_session(parent_session_id)
        if parent_task is None or parent_task.backend != self.backend_name:
            return 1, parent_session_id
        if parent_task.depth >= self.config.max_depth:
            raise TaskDepthError(parent_task.depth, self.config.max_depth)
        return parent_task.depth + 1, parent_task.root_session_id

    async def _keep_queue_bound(self, task: Task) -> None:
        """`QueueFullError` (and the new task and its session gone) when its parent has
        ``max_queued_per_parent`` tasks waiting before it.

        Checked after the insert, by its place in its parent's queue: of tasks stored at once,
        exactly those past the bound go, whichever manager stored them. A task admitted in the
        meantime stays (it no longer waits). The store counts the parent's queued tasks only
        (`TaskStore.queued_ahead`): a burst of tasks costs in proportion to its size.
        """
        place = await self.store.queued_ahead(task)
        cap = self.config.max_queued_per_parent
        if place < cap or await self.store.delete_queued(task.id) is None:
            return
        if task.session_id:
            await self._drop_session(task.session_id)
        raise QueueFullError(place, cap)

    async def _drop_session(self, session_id: str) -> None:
        try:
            await self.backend.delete_session(session_id)
        except BackendError as cleanup:
            log.warning("could not delete session %s: %s", session_id, cleanup)

    async def _admit_at_once(self, task: Task) -> Task:
        """Admit what the caps allow now; `task` as it is after that (running, or queued).

        A task being prepared here (its session, its fork) may be admitted too: its prompt
        waits for the preparation in this process (one prepared elsewhere is admitted once it
        is ready).
        """
        preparing = not task.ready and task.id in self._preparing
        try:
            admitted = await self.admitter.admit_task(task.id, preparing=preparing)
            if admitted is not None:
                return admitted
        except StoreError as exc:
            # it is stored and queued: the admitter's next pass starts it
            log.warning("admission after queueing %s failed (retried): %s", task.id, exc)
            self.admitter.poke()
        return task

    def _start_preparing(self, task: Task, after: asyncio.Event | None = None) -> None:
        """Create a new task's session, then build and inject its fork's context (if it is a
        fork), now, in the background; it is admitted once that is done. A graceful close
        waits for it as for a prompt being sent (a session created then recorded)."""
        job = self.launches.spawn(self._prepare(task, after))
        self._preparing[task.id] = job
        job.add_done_callback(lambda _: self._preparing.pop(task.id, None))

    async def _prepare(self, task: Task, after: asyncio.Event | None) -> None:
        if after is not None:
            await after.wait()
        if await self.launcher.prepare(task) is not None:
            self.admitter.poke()

    def _followup_due(self, task: Task) -> None:
        """A turn ended into its next one: a try again after a provider error, or a queued
        follow-up, waits in the queue (its slot is free now; a try again not before its
        backoff ends); a follow-up sent with ``when="now"`` keeps the aborted turn's slot and
        is sent at once; when the turn's end could not name its last message, the follow-up
        is queued from here."""
        if task.status is TaskStatus.QUEUED:
            # the ended turn's run goes (not a newer one: another pass may have admitted it)
            self.registry.drop(task.id, task.turn - 1)
            self.admitter.poke_at(task.retry_at)
        elif task.status.active and task.turn_started_at is None:
            run = self.watcher.follow(task)
            self.launches.spawn(self._send_turn(task, run))
        elif task.status is TaskStatus.COMPLETED and task.pending_followups:
            self.launches.spawn(self._send_queued(task))

    async def _send_turn(self, task: Task, run: Run) -> None:
        """Send a follow-up that took the slot of the turn it aborted (``when="now"``)."""
        prompt = task.last_prompt or task.prompt
        await self.launcher.resume(task, run, prompt, task.turn_after_message_id)

    async def _send_queued(self, task: Task) -> None:
        """Queue a completed task's first queued follow-up for admission (reads the child's
        last message)."""
        assert task.session_id is not None
        followup = task.pending_followups[0]
        try:
            session = await self.backend.get_session(task.session_id)
            last = await self.backend.messages(task.session_id, limit=1)
            after = str(last[-1]["info"]["id"]) if last else None
            message_id = message_id_after(after, _created_ms(session), followup.token)
            out = await self.recorder.apply(
                task.id,
                resumed_queued(followup.id, after, self.instance_id, message_id),
                "task.resumed",
                background=True,
            )
        except (BackendError, StoreError) as exc:
            log.warning("queued follow-up of %s not sent: %s", task.id, exc)
            return
        if out is not None:
            self._followup_due(out[0])

    def _admitted(self, tasks: builtins.list[Task]) -> None:
        """Follow the tasks this manager admitted, and send their prompts."""
        for task in tasks:
            created = task.id in self._creating
            self._creating.discard(task.id)
            if created:
                self._created[task.id] = task
            self.recorder.changed(task, "task.created" if created else "task.updated")
            # a task with no session yet is followed once it has one
            run = self.watcher.follow(task) if task.session_id else None
            self.launches.spawn(self._launch(task, run))

    async def _launch(self, task: Task, run: Run | None = None) -> None:
        """Send an admitted turn's prompt, once its session exists and its fork (if any) is
        in it."""
        if not task.ready:
            ready = await self._prepared(task)
            if ready is None:
                return
            task = ready
        if run is None or run.session_id != task.session_id:
            run = self.watcher.follow(task)
        await self.launcher.launch(task, run)

    async def _prepared(self, task: Task) -> Task | None:
        """The admitted task once it is prepared (by the job started when it was asked for,
        or here when that job is gone: a takeover): its session created, its fork in it; None
        if it ended meanwhile."""
        job = self._preparing.get(task.id)
        if job is not None:
            await asyncio.wait({job})
        try:
            current = await self.store.get(task.id)
            if current is not None and not current.ready and current.status.active:
                await self.launcher.prepare(current)
                current = await self.store.get(task.id)
        except StoreError as exc:
            await self.watcher.finish(
                task.id,
                task.turn,
                TaskStatus.ERROR,
                error=f"preparing the task: reading it from the store failed: {exc}",
            )
            return None
        if (
            current is None
            or not current.ready
            or current.turn != task.turn
            or not current.status.active
        ):
            return None
        return current

    def _on_change(self, change: TaskChange) -> None:
        """A turn that ended frees a slot: a queued task may start."""
        if change.kind in _SLOT_FREEING:
            self.admitter.poke()

    async def _adopt(self, tasks: builtins.list[Task]) -> None:
        """Follow tasks taken over from a dead (or closed) manager; prepare the queued ones it
        had not prepared (their session, their fork: the queue admits them, whoever owns them)."""
        for task in tasks:
            if task.status is TaskStatus.QUEUED:
                if not task.ready:
                    self._start_preparing(task)
                if task.retry_at is not None:
                    # a try again waiting out its backoff: admitted once it is over
                    self.admitter.poke_at(task.retry_at)
                continue
            if task.session_id is None:
                # admitted before its session was created: create it, then send the prompt
                self.launches.spawn(self._launch(task))
                continue
            if task.turn_started_at is not None:
                self.watcher.follow(task)
                continue
            present = await self._message_ids(task)
            started_task = await self._started_unrecorded(task, present)
            if started_task is not None:
                self.watcher.follow(started_task)
                continue
            # admitted, its prompt maybe never sent (and its fork maybe not prepared): send it
            # again (the same message id: one message, answered once)
            run = self.watcher.follow(task)
            self.launches.spawn(self._launch(task, run))
        self.admitter.poke()

    async def _message_ids(self, task: Task) -> dict[str, JSON] | None:
        """The child's messages by id, or None when they cannot be read now."""
        assert task.session_id is not None
        try:
            messages = await self.backend.messages(task.session_id)
        except BackendError as exc:
            log.info("adopting %s: its messages cannot be read (%s)", task.id, exc)
            return None
        return {str((m.get("info") or {}).get("id", "")): m for m in messages}

    async def _started_unrecorded(self, task: Task, present: dict[str, JSON] | None) -> Task | None:
        """The task, recorded as started, if its turn's prompt is in the child's messages (its
        manager stopped after sending it, before storing that); None if it was not sent."""
        if present is None:
            return None
        after = task.turn_after_message_id
        previous: str | None = after
        for message in turn_messages(list(present.values()), after):
            info = message.get("info") or {}
            message_id = str(info.get("id", ""))
            if task.prompt_message_id is not None:
                sent = message_id == task.prompt_message_id
            else:  # stored by an older version: the prompt is found by its text
                texts = [p.get("text") for p in message.get("parts") or () if isinstance(p, dict)]
                sent = info.get("role") == "user" and task.last_prompt in texts
            if sent:
                out = await self.recorder.apply(
                    task.id, started(task.turn, previous), "task.updated", background=True
                )
                return None if out is None else out[0]
            previous = message_id
        return None

    async def _running_tasks(self, parent_session_id: str) -> int:
        """The parent's tasks still to end: running, or queued."""
        tasks = await self.store.list_tasks(
            parent_session_id, PENDING_STATUSES, backend=self.backend_name
        )
        return len(tasks)

    async def _retire_session(self, session_id: str, *, abort: bool) -> None:
        if abort:
            await abort_quietly(self.backend, session_id)
        if self._delete_cleared:
            try:
                await self.backend.delete_session(session_id)
            except SessionNotFoundError:
                pass
            except BackendError as exc:
                log.warning("could not delete cleared session %s: %s", session_id, exc)

    async def _session_deleted(self, session_id: str) -> None:
        """A deleted child ends its task in error; a deleted parent clears its tasks."""
        run = self.registry.by_session(session_id)
        if run is not None:
            await self.watcher.session_gone(run)
        if await self.store.list_tasks(session_id, backend=self.backend_name):
            await self.clear(session_id)


def _being_resumed(task: Task) -> bool:
    """A follow-up of the task is queued or running."""
    return task.resume_count > 0 and task.status in (TaskStatus.QUEUED, TaskStatus.RESUMED)
