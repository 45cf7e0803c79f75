"""`Launcher`: the background part of starting tasks: a fork's context, and each turn's prompt.

The child session is created (and the task stored, queued) by the manager's `task` call. A
forked task's context is built from the parent's messages right after that call and injected
into the child session at once (`prepare_fork`: the child carries the parent's context as it
was when the task was asked for); the prompt is sent when the task is admitted (`launch`). A
failure at any step ends the turn in ``error`` with the step and the reason (a failed follow-up
returns the task to ``completed``), and the parent is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..config import ForkConfig
from .backend import PromptRequest, SessionBackend
from .catalog import ModelCatalog, split_model
from .config import TaskManagerConfig
from .errors import BackendError
from .fork_budget import fork_config, preamble_config
from .models import Task, TaskStatus
from .recorder import Recorder
from .registry import Run
from .store import TaskStore
from .tool_names import disabled_tools
from .transitions import fork_prepared, started
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

    async def prepare_fork(self, task: Task) -> bool:
        """Build a forked task's context from its parent's messages now, inject it into the
        child session, and record that the task may start; False if that failed (the task then
        ended in error) or the task no longer waits for it.

        A manager that takes the task over from one that died before recording it runs this
        again: a context already in the child session (its chosen message id) is not sent again.
        """
        assert task.session_id is not None
        step = "fork: reading the child's messages"
        try:
            messages = await self._backend.messages(task.session_id)
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
