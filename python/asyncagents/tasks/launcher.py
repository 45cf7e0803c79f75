"""`Launcher`: the background part of starting tasks: the child session, a fork's context, and
each turn's prompt.

The manager's `task` call stores the task, queued, without a session, and returns. Right after,
in the background, its child session is created and recorded (`create_session`, once per task
whichever managers try); a forked task's context is then built from the parent's messages and
injected into the child session (`prepare_fork`: the child carries the parent's context as it
was when the task was asked for). The task is admitted once that is done (`Task.ready`), and its
prompt is sent then (`launch`). A failure at any step ends the turn in ``error`` with the step
and the reason (a failed follow-up returns the task to ``completed``), and the parent is told.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from ..config import ForkConfig
from .backend import JSON, PromptRequest, SessionBackend
from .catalog import ModelCatalog, split_model
from .config import TaskManagerConfig
from .errors import (
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailableError,
)
from .fork_budget import fork_config, preamble_config
from .models import Task, TaskStatus, message_id_after, now_ms
from .recorder import Recorder
from .registry import Run
from .store import TaskStore
from .tool_names import disabled_tools
from .transitions import fork_prepared, session_created, started
from .watcher import Watcher, abort_quietly

log = logging.getLogger(__name__)


class ForkContextLike(Protocol):
    """What the fork step needs from `asyncagents.build_fork_context`'s result."""

    @property
    def text(self) -> str: ...

    @property
    def stats(self) -> Any: ...


#: the fork pipeline: the parent's raw messages and the budget sized for the child's model
ForkBuilder = Callable[[bytes, ForkConfig], ForkContextLike]


def default_fork_builder(raw: bytes, config: ForkConfig | None = None) -> ForkContextLike:
    """The fork pipeline, imported on first use (it loads the Rust extension)."""
    from asyncagents import build_fork_context

    ctx: ForkContextLike = build_fork_context(raw, config)
    return ctx


def created_ms(session: JSON) -> int:
    """When the server created a session (its clock, which its message ids follow)."""
    times = session.get("time")
    created = times.get("created") if isinstance(times, dict) else None
    return created if isinstance(created, int) and created > 0 else now_ms()


def new_token() -> str:
    """A random alphanumeric tail that makes a chosen message id unique."""
    return os.urandom(5).hex()


def session_title(task: Task) -> str:
    """The child session's title, as OpenCode's own task tool names its sub-agents' sessions."""
    return f"{task.description} (@{task.agent} subagent)"


def with_session(task: Task, session: JSON) -> Task:
    """`task` in its new child `session`, with the message ids chosen for its fork context and
    its prompt (sorting from the session's creation, before anything the server adds later)."""
    session_id = session.get("id") if isinstance(session, dict) else None
    if not isinstance(session_id, str) or not session_id:
        raise BackendProtocolError(
            "the session server's answer to creating a session has no session id: "
            f"{str(session)[:200]}"
        )
    context_id = message_id_after(None, created_ms(session), new_token())
    return task.model_copy(
        update={
            "session_id": session_id,
            "context_message_id": context_id,
            "prompt_message_id": message_id_after(context_id, 0, new_token()),
        }
    )


def _stats_dict(stats: Any) -> dict[str, Any] | None:
    dump = getattr(stats, "model_dump", None)
    if callable(dump):
        out: dict[str, Any] = dump(mode="json")
        return out
    return dict(stats) if isinstance(stats, dict) else None


class Launcher:
    """Runs the background part of launching and resuming a task."""

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore,
        recorder: Recorder,
        watcher: Watcher,
        config: TaskManagerConfig,
        fork_builder: ForkBuilder,
        catalog: ModelCatalog | None = None,
    ) -> None:
        self._catalog = catalog or ModelCatalog(backend, config.allowed_models, config.models_ttl)
        self._backend = backend
        self._store = store
        self._recorder = recorder
        self._watcher = watcher
        self._config = config
        self._fork_builder = fork_builder
        #: the last session creation failed because the server could not be reached (or refused
        #: our credentials), and none succeeded since: `TaskManager.task` then creates the
        #: session before it returns, so the caller hears of a down server at once
        self.unreachable = False

    def request(self, task: Task, text: str, message_id: str | None) -> PromptRequest:
        """A prompt to the child: its agent, its model (the task's, else the configured one),
        the message id chosen for it (the same id sent twice is one message), and the task tools
        switched off unless the child may start tasks of its own (its depth is below
        ``max_depth``)."""
        return PromptRequest(
            text=text,
            agent=task.agent or None,
            tools=disabled_tools() if task.depth >= self._config.max_depth else {},
            model=split_model(task.model) if task.model else self._config.model,
            message_id=message_id,
        )

    async def fork_config(self, task: Task) -> ForkConfig:
        """The fork's budget sized to the child model's context window (`fork_budget`); the
        default budget when the server's models cannot be read now."""
        name, info = task.model, None
        try:
            name = name or await self._catalog.default()
            info = await self._catalog.info(name)
        except (BackendError, AttributeError) as exc:
            # a server that cannot say (or a backend without the call): the default budget
            log.info("task %s: the server's models cannot be read (%s)", task.id, exc)
        return fork_config(name, info, task.fork_turns, len(task.prompt))

    async def new_session(self, task: Task) -> JSON:
        """Create the child session of `task` (a `BackendError` as the server gave it); keeps
        `unreachable` up to date."""
        try:
            session = await self._backend.create_session(
                parent_id=task.parent_session_id, title=session_title(task)
            )
        except (BackendUnavailableError, BackendAuthError):
            self.unreachable = True
            raise
        self.unreachable = False
        return session

    async def prepare(self, task: Task) -> Task | None:
        """Make a stored task ready to be admitted: create its child session if none is
        recorded, then prepare its fork; the task as it is then (not re-read after a fork), or
        None if it failed (the task then ended in error) or ended meanwhile."""
        fresh = False
        if task.session_id is None:
            created = await self.create_session(task)
            if created is None:
                return None
            task, fresh = created
        if task.fork_pending and not await self.prepare_fork(task, fresh=fresh):
            return None
        return task

    async def create_session(self, task: Task) -> tuple[Task, bool] | None:
        """Create a new task's child session and record it, with the message ids chosen in it;
        the task as recorded, and whether the session is the one this call created (else
        another manager's, recorded first); None if the creation failed (the task then ended
        in error with the reason, and its parent is told) or the task ended meanwhile.

        Once per task: the record is a compare-and-set on a task with no session. A manager
        that loses the race (two took the task in turn: a takeover while its first owner still
        ran) deletes its own session and goes on with the recorded one. A manager that dies
        between the creation and the record leaves an empty child session behind; the next
        owner creates another.
        """
        try:
            mine = with_session(task, await self.new_session(task))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("task %s failed at creating the child session: %s", task.id, exc)
            await self._watcher.finish(
                task.id,
                task.turn,
                TaskStatus.ERROR,
                error=f"creating the child session failed: {exc}",
            )
            return None
        assert mine.session_id and mine.context_message_id and mine.prompt_message_id
        recorded = session_created(mine.session_id, mine.context_message_id, mine.prompt_message_id)
        out = await self._recorder.apply(task.id, recorded, "task.updated", background=True)
        if out is not None:
            return out[0], True
        # another manager recorded its session first, or the task ended or was cleared
        # meanwhile, or the store failed (the task then waits for its next owner)
        await self.drop_session(mine.session_id)
        try:
            current = await self._store.get(task.id)
        except Exception as exc:
            log.warning("task %s: its child session could not be recorded: %s", task.id, exc)
            return None
        if current is None or not current.status.pending or current.session_id is None:
            return None
        return current, False

    async def drop_session(self, session_id: str) -> None:
        """Delete a session no task uses; a failure is logged (it stays, empty)."""
        try:
            await self._backend.delete_session(session_id)
        except BackendError as exc:
            log.warning("could not delete session %s: %s", session_id, exc)

    async def prepare_fork(self, task: Task, *, fresh: bool = False) -> bool:
        """Build a forked task's context from its parent's messages now, inject it into the
        child session, and record that the task may start; False if that failed (the task then
        ended in error) or the task no longer waits for it.

        A manager that takes the task over from one that died before recording it runs this
        again: a context already in the child session (its chosen message id) is not sent again.
        A session this call's caller has just created (`fresh`) holds nothing: it is not read.
        """
        assert task.session_id is not None
        step = "fork: reading the child's messages"
        try:
            messages = [] if fresh else await self._backend.messages(task.session_id)
            present = [str((m.get("info") or {}).get("id", "")) for m in messages]
            stats: dict[str, Any] | None = None
            after: str | None = None
            if task.context_message_id is not None and task.context_message_id in present:
                after = task.context_message_id
            elif task.context_message_id is None and present:
                after = present[-1]  # stored by an older version, without a chosen id
            else:
                step = "fork: reading the parent's messages"
                raw = await self._backend.messages_raw(task.parent_session_id)
                step = "fork: sizing the budget"
                config = await self.fork_config(task)
                step = "fork: building the context"
                ctx = await asyncio.to_thread(self._fork_builder, raw, preamble_config(config))
                stats = _stats_dict(ctx.stats)
                if stats is not None:
                    stats["char_budget"] = config.char_budget
                    stats["budget_reason"] = config.budget_reason
                    stats["fork_turns"] = config.fork_turns
                if ctx.text:
                    step = "fork: injecting the context"
                    injected = await self._backend.prompt(
                        task.session_id,
                        self.request(task, ctx.text, task.context_message_id).model_copy(
                            update={"no_reply": True}
                        ),
                    )
                    after = str(injected["info"]["id"])
            step = "fork: recording the context"
            out = await self._recorder.apply(
                task.id, fork_prepared(after, stats), "task.updated", background=True
            )
            return out is not None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("task %s failed at %s: %s", task.id, step, exc)
            await self._watcher.finish(
                task.id, task.turn, TaskStatus.ERROR, error=f"{step} failed: {exc}"
            )
            return False

    async def launch(self, task: Task, run: Run) -> None:
        """Send an admitted turn's prompt (a fork's context is in the session already); a
        failure ends the task in error (a follow-up: completed again, with the reason)."""
        assert task.session_id is not None
        prompt = task.last_prompt or task.prompt
        if task.resume_count > 0:
            await self.resume(task, run, prompt, task.turn_after_message_id)
            return
        try:
            await self.start_turn(task, run, prompt, task.turn_after_message_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("task %s failed at sending the prompt: %s", task.id, exc)
            await self._watcher.finish(
                task.id, task.turn, TaskStatus.ERROR, error=f"sending the prompt failed: {exc}"
            )

    async def resume(self, task: Task, run: Run, prompt: str, after: str | None) -> None:
        """Send a follow-up; a failure returns the task to completed with the reason."""
        try:
            await self.start_turn(task, run, prompt, after)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._watcher.finish(
                task.id, task.turn, TaskStatus.ERROR, error=f"resume failed: {exc}"
            )

    async def start_turn(self, task: Task, run: Run, text: str, after: str | None) -> None:
        """prompt_async, then record that the turn runs (and check once: it may be over)."""
        assert task.session_id is not None
        await self._backend.prompt_async(
            task.session_id, self.request(task, text, task.prompt_message_id)
        )
        run.after_message_id = after
        run.prompt_sent = True
        run.progressed()  # the idle clock starts with the turn
        out = await self._recorder.apply(
            task.id, started(task.turn, after), "task.updated", background=True
        )
        if out is None:
            try:
                current = await self._store.get(task.id)
            except Exception as exc:
                log.info("task %s: the store failed (%s); the checks decide", task.id, exc)
                current = task
            if current is None or current.turn != task.turn or not current.status.active:
                # cancelled or cleared while we were starting it: stop the run we just began
                await abort_quietly(self._backend, task.session_id)
                return
            # the write failed: the run stays followed, the checks end it from the messages
        self._watcher.schedule_check(task.id)
