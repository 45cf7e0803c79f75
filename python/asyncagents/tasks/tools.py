"""The agent-facing side: the five tools (name, description, JSON Schema) and their texts.

`run_tool` executes one tool call for the session that made it and always returns text, whatever
the arguments, the server or the store do: bad arguments come back as one problem per field
(see `tool_args`), a `TaskError` as its message (which tells the agent what to do instead), and
anything unexpected as a text saying the outcome is unknown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..plain import surrogate_free
from .admission import QueuePlace
from .conversation import format_conversation
from .errors import StoreError, TaskError
from .markdown import code, code_label
from .models import OutputResult, Task, TaskStatus, now_ms
from .notices import usage_line
from .retries import DEFAULT_MODEL_NAME, task_attempts
from .tool_args import (
    MAX_OUTPUT_TIMEOUT_SECONDS,
    CancelArguments,
    ClearArguments,
    ListArguments,
    OutputArguments,
    TaskArguments,
    ToolArguments,
    describe_problems,
    parse_arguments,
    tool_parameters,
)
from .tool_names import (
    CANCEL,
    CLEAR,
    DEFAULT_OUTPUT_TIMEOUT_SECONDS,
    LIST,
    OUTPUT,
    TASK,
    TOOL_NAMES,
    disabled_tools,
)
from .transitions import dropped_line
from .usage import usage_compact

if TYPE_CHECKING:
    from .manager import TaskManager

__all__ = [
    "DEFAULT_OUTPUT_TIMEOUT_SECONDS",
    "MAX_OUTPUT_TIMEOUT_SECONDS",
    "TOOLS",
    "TOOL_NAMES",
    "ToolDefinition",
    "disabled_tools",
    "run_tool",
]

log = logging.getLogger(__name__)

EMPTY_LIST = "No background tasks found"


class ToolDefinition(BaseModel):
    """One tool as an agent server registers it."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


_T = int(DEFAULT_OUTPUT_TIMEOUT_SECONDS)

TASK_TOOL = ToolDefinition(
    name=TASK,
    description=(
        "Start a background sub-agent task in its own child session and return its task id "
        "at once (it never waits for the run). You get a notice in this session when it "
        "completes or fails; meanwhile keep working. fork=true gives the child a copy of "
        "this conversation (long tool outputs shortened, oldest messages dropped to fit). "
        "resume=<task id> sends a follow-up prompt to a completed task, which keeps its "
        "history (to a running one with when=after_current or when=now); fork and resume "
        "cannot be combined. model=provider/model picks the child's model. Children cannot "
        "start tasks themselves."
    ),
    parameters=tool_parameters(TaskArguments),
)

OUTPUT_TOOL = ToolDefinition(
    name=OUTPUT,
    description=(
        "Read a background task: its status, and its result once it has ended; for a running "
        "task, its progress (tool calls so far, last activity). Non-blocking by default. "
        f"block=true waits until the task (or a resume) finishes, at most `timeout` seconds "
        f"(default {_T}); after a timeout the task keeps running and you can call again. "
        "full_session=true also returns the child's whole conversation; since_message_id "
        "only its messages after that id; message_limit only its latest messages."
    ),
    parameters=tool_parameters(OutputArguments),
)

LIST_TOOL = ToolDefinition(
    name=LIST,
    description=(
        "List the background tasks started from this session, newest first, with their status. "
        "(forked) and (resumed) after an id mark forked and resumed tasks."
    ),
    parameters=tool_parameters(ListArguments),
)

CANCEL_TOOL = ToolDefinition(
    name=CANCEL,
    description="Cancel a running background task: its run is aborted and it ends as cancelled.",
    parameters=tool_parameters(CancelArguments),
)

CLEAR_TOOL = ToolDefinition(
    name=CLEAR,
    description=(
        "Remove every background task of this session: running ones are aborted, and their "
        "ids and results are gone (they cannot be read or resumed afterwards)."
    ),
    parameters=tool_parameters(ClearArguments),
)

TOOLS: tuple[ToolDefinition, ...] = (TASK_TOOL, OUTPUT_TOOL, LIST_TOOL, CANCEL_TOOL, CLEAR_TOOL)

#: each tool's argument model
ARGUMENTS: dict[str, type[ToolArguments]] = {
    TASK: TaskArguments,
    OUTPUT: OutputArguments,
    LIST: ListArguments,
    CANCEL: CancelArguments,
    CLEAR: ClearArguments,
}


def _ago(ms: int | None, now: int) -> str:
    if ms is None:
        return "unknown"
    return f"{max(0.0, (now - ms) / 1000):.0f}s ago"


def _on(task: Task) -> str:
    """`` on provider/model`` after the agent, when the task has its own model."""
    return f" on {task.model}" if task.model else ""


def _wait_call(task: Task) -> str:
    """The blocking read of `task`, as code."""
    return code(f'asyncagents_output(task_id="{task.id}", block=true)')


def queue_state(place: QueuePlace | None, max_running: int | None) -> str:
    """Where a queued task stands: ``position 3 in the queue; 5/5 running on this server
    (max_running)``, naming the widest cap that holds it back (else the server's count)."""
    if place is None:
        return "waiting in the queue"
    if place.blockers:
        b = place.blockers[0]
        held = f"{b.running}/{b.cap} running {b.scope} ({b.name})"
    elif max_running is not None:
        held = f"{place.running}/{max_running} running on this server (max_running)"
    else:
        held = f"{place.running} running on this server"
    return f"position {place.position} in the queue; {held}"


def format_started(
    task: Task, place: QueuePlace | None = None, max_running: int | None = None
) -> str:
    """Reply to asyncagents_task (launch or resume); `place` for a queued task."""
    wait = f"To wait for it now, call {_wait_call(task)}."
    if task.status is TaskStatus.QUEUED and task.resume_count > 0:
        return (
            f"Follow-up queued for background task {code_label(task)} ({task.agent}): "
            f"{task.description} ({queue_state(place, max_running)})\n"
            "Status: queued. It is sent by itself when a slot frees; you will get a notice with "
            f"its full response when it answers. {wait}"
        )
    if task.status is TaskStatus.QUEUED:
        return (
            f"Background task queued: {code_label(task)} ({queue_state(place, max_running)})\n"
            f"Agent: {task.agent}\nDescription: {task.description}\nStatus: queued\n"
            "It starts by itself when a slot frees, and you will get a notice in this session "
            f"when it completes or fails; continue with other work meanwhile. {wait}"
        )
    if task.resume_count > 0 and task.status is TaskStatus.RESUMED:
        return (
            f"Follow-up sent to background task {code_label(task)} ({task.agent}): "
            f"{task.description}\nStatus: resumed. You will get a notice with its full response "
            f"when it answers. To wait for it now, call {_wait_call(task)}."
        )
    return (
        f"Background task started: {code_label(task)}\nAgent: {task.agent}\n"
        + (f"Model: {task.model}\n" if task.model else "")
        + f"Description: {task.description}\nStatus: {task.status.value}\n"
        "You will get a notice in this session when it completes or fails; continue with "
        f"other work meanwhile. To wait for it now, call {_wait_call(task)}."
    )


def format_queued(task: Task, *, interrupt: bool) -> str:
    """Reply to asyncagents_task(resume=..., when=...) for a task still running."""
    if interrupt:
        return (
            f"Follow-up for background task {code(task.id)}: {task.description}\n"
            "Its running turn is being aborted; the follow-up is sent as soon as it stops. "
            "You will get a notice with its response."
        )
    return (
        f"Follow-up queued for background task {code(task.id)}: {task.description}\n"
        f"It is sent when the running turn ends ({len(task.pending_followups)} follow-up(s) "
        "queued). You will get a notice with its response."
    )


def retry_lines(task: Task, now: int) -> list[str]:
    """A running or queued task's provider trouble: OpenCode retrying now, or our try again
    waiting (for its backoff, then a slot)."""
    lines: list[str] = []
    retry = task.progress.retry
    if retry is not None:
        wait = retry.get("next")
        when = f", next try in {max(0, (wait - now) / 1000):.0f}s" if isinstance(wait, int) else ""
        lines.append(
            f"OpenCode is retrying the provider: attempt {retry.get('attempt')} "
            f"({retry.get('message')}){when}."
        )
    if task.tries:
        on = task.model or DEFAULT_MODEL_NAME
        if task.retry_at is not None and task.turn_started_at is None and task.retry_at > now:
            lines.append(
                f"Try {len(task.tries)} on {on} in {max(0, (task.retry_at - now) / 1000):.0f}s, "
                f"after a provider error: {task.retry_error}"
            )
        else:
            lines.append(
                f"Try {len(task.tries)} on {on}, after a provider error: {task.retry_error}"
            )
    return lines


def format_output(
    out: OutputResult, place: QueuePlace | None = None, max_running: int | None = None
) -> str:
    """Reply to asyncagents_output (`place` for a queued task); its last line is the task's
    tokens and cost."""
    return f"{_output_text(out, place, max_running)}\n{usage_line(out.task)}"


def _output_text(
    out: OutputResult, place: QueuePlace | None = None, max_running: int | None = None
) -> str:
    task = out.task
    now = now_ms()
    head = (
        f"Task {code_label(task)} [{task.status.value}] {task.agent}{_on(task)}: {task.description}"
    )
    attempts = (
        None if task.status.active or task.status is TaskStatus.QUEUED else task_attempts(task)
    )
    if attempts:
        head += f"\n{attempts}"
    if task.status is TaskStatus.QUEUED:
        what = "follow-up" if task.resume_count > 0 else "task"
        if task.tries:
            what = "next try"
        lines = [head, f"Waiting in the queue: {queue_state(place, max_running)}."]
        # a try again after a provider error waits here for its backoff and a slot
        lines.extend(retry_lines(task, now))
        if task.pending_followups:
            lines.append(
                f"{len(task.pending_followups)} queued follow-up(s) are sent when this turn ends."
            )
        if out.timed_out:
            lines.insert(0, f"Still queued after waiting {out.waited_seconds:.0f}s.")
        lines.append(
            f"The {what} starts by itself: continue with other work (you will get a notice), "
            "or call asyncagents_output again with block=true to wait."
        )
        return "\n".join(lines)
    if task.status.active:
        p = task.progress
        started = task.turn_started_at or task.created_at
        lines = [
            head,
            f"Running for {(now - started) / 1000:.0f}s; {p.tool_calls} tool call(s) so far"
            + (f" (last: {p.last_tool})" if p.last_tool else "")
            + f"; last activity {_ago(p.last_activity_at, now)}.",
        ]
        if task.pending_followups:
            lines.append(
                f"{len(task.pending_followups)} queued follow-up(s) are sent when this turn ends."
            )
        lines.extend(retry_lines(task, now))
        if out.timed_out:
            lines.insert(0, f"Still running after waiting {out.waited_seconds:.0f}s.")
        lines.append(
            "It is still working: continue with other work (you will get a notice), or call "
            "asyncagents_output again with block=true to wait."
        )
        return "\n".join(lines)
    if task.status is TaskStatus.COMPLETED:
        text = f"{head}\n\nResult:\n{task.result or '(the task finished without a text reply)'}"
        if task.error:
            # a follow-up failed or was cancelled: the task keeps its last good result
            text += (
                f"\n\nThe last follow-up did not answer: {task.error}\nThe result above is from "
                "before it; the task can be resumed again."
            )
        return text
    if task.status is TaskStatus.ERROR:
        return f"{head}\n\nError: {task.error}\nStart a new asyncagents_task to try again."
    return f"{head}\n\nThe task was cancelled" + (f": {task.error}" if task.error else ".")


def format_list(tasks: list[Task]) -> str:
    """Reply to asyncagents_list: newest first, marks after the id."""
    if not tasks:
        return EMPTY_LIST
    lines = ["Background tasks (newest first):"]
    for task in tasks:
        tries = f" ({len(task.tries)} attempts)" if task.tries else ""
        retry = task.progress.retry if task.status.active else None
        if retry is not None:
            tries += f" (OpenCode retrying the provider: attempt {retry.get('attempt')})"
        lines.append(
            f"- {code_label(task)} [{task.status.value}] {task.agent}{_on(task)}: "
            f"{task.description}{tries} ({usage_compact(task.usage)})"
        )
    return "\n".join(lines)


def format_cancelled(task: Task, dropped: int = 0) -> str:
    """Reply to asyncagents_cancel (a cancelled follow-up leaves the task completed)."""
    tail = f"\n{dropped_line(dropped)}" if dropped else ""
    if task.status is TaskStatus.COMPLETED:
        return (
            f"Cancelled the follow-up of background task {code_label(task)}: "
            f"{task.description}\n"
            "It is completed again with its previous result." + tail
        )
    return f"Cancelled background task {code_label(task)}: {task.description}" + tail


def format_cleared(tasks: list[Task]) -> str:
    """Reply to asyncagents_clear."""
    if not tasks:
        return EMPTY_LIST
    aborted = sum(1 for t in tasks if t.status.active)
    return f"Cleared {len(tasks)} background task(s); {aborted} running one(s) aborted."


def format_bad_arguments(tool: str, exc: ValidationError) -> str:
    """Reply to a call whose arguments do not validate: every problem, naming its field."""
    return describe_problems(tool, ARGUMENTS[tool], exc)


def format_unknown_tool(name: str) -> str:
    """Reply to a call of a tool that does not exist."""
    return f"Error: unknown tool {name!r}; the task tools are {', '.join(TOOL_NAMES)}."


def format_unexpected(tool: str, exc: BaseException) -> str:
    """Reply when a call failed in a way no error type foresaw: its outcome is unknown."""
    return (
        f"Error: {tool} failed unexpectedly ({type(exc).__name__}: {_safe_str(exc)}). "
        "Call asyncagents_list to see whether it took effect before trying again."
    )


def format_store_failed(tool: str) -> str:
    """Reply when the task store failed (its message, which may name a DSN, is only logged)."""
    return (
        f"Error: {tool} failed: the task store is unavailable (the asyncagents service's log "
        "has the details). Call asyncagents_list to see whether it took effect before trying "
        "again."
    )


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return "(no message)"


#: reply when the calling session's id is unusable (the agent server sent a broken call)
BAD_SESSION = "Error: the calling session's id must be non-empty Unicode text."


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value) and surrogate_free(value)


def _valid_unicode(text: str) -> str:
    """`text` with any lone surrogate replaced (the answer must encode as UTF-8)."""
    if surrogate_free(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


async def _place(manager: TaskManager, task: Task) -> QueuePlace | None:
    """A queued task's place (None otherwise, or if it cannot be read: the text says less)."""
    if task.status is not TaskStatus.QUEUED:
        return None
    try:
        return await manager.queue_place(task.id)
    except TaskError as exc:
        log.info("the queue place of %s cannot be read: %s", task.id, exc)
        return None


async def _task(manager: TaskManager, session_id: str, args: TaskArguments) -> str:
    task = await manager.task(
        session_id,
        args.prompt,
        agent=args.agent,
        description=args.description,
        fork=args.fork,
        resume=args.resume,
        limits=args.limits,
        model=args.model,
        fork_turns=args.fork_turns,
        when=args.when,
    )
    queued = [f for f in task.pending_followups if f.prompt == args.prompt]
    if args.when is not None and queued:
        return format_queued(task, interrupt=queued[-1].interrupt)
    place = await _place(manager, task)
    if task.status is TaskStatus.QUEUED and place is None:
        # no longer queued: admitted meanwhile (by any manager), so say it started (as it did
        # then; it may have ended since, which its notice tells)
        try:
            fresh = await manager.store.get(task.id)
        except TaskError as exc:
            log.info("%s cannot be read again: %s", task.id, exc)
            fresh = None
        if fresh is not None and fresh.status is not TaskStatus.QUEUED:
            started = TaskStatus.RESUMED if fresh.resume_count > 0 else TaskStatus.RUNNING
            task = fresh.model_copy(update={"status": started})
    return format_started(task, place, manager.config.max_running)


async def _output(
    manager: TaskManager,
    session_id: str,
    args: OutputArguments,
    interrupt: asyncio.Event | None,
) -> str:
    def read(block: bool) -> Awaitable[OutputResult]:
        return manager.output(
            args.task_id, block=block, timeout=args.timeout, parent_session_id=session_id
        )

    if args.block and interrupt is not None:
        out = await _unless_interrupted(read(True), interrupt, lambda: read(False))
    else:
        out = await read(args.block)
    text = format_output(out, await _place(manager, out.task), manager.config.max_running)
    if args.wants_conversation and out.task.session_id:
        chosen = await manager.read_messages(
            out.task.id,
            session_id,
            full_session=True,
            since_message_id=args.since_message_id,
            message_limit=args.message_limit,
        )
        text = f"{text}\n\n{format_conversation(chosen.messages, total=chosen.total)}"
    return text


async def _unless_interrupted(
    wait: Awaitable[OutputResult],
    interrupt: asyncio.Event,
    instead: Callable[[], Awaitable[OutputResult]],
) -> OutputResult:
    """Await `wait`; if `interrupt` is set first, cancel it and await `instead()`."""
    job = asyncio.ensure_future(wait)
    stop = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not job.done():
            job.cancel()
            await asyncio.wait({job})
    if not job.cancelled():
        return job.result()
    return await instead()


async def _dispatch(
    manager: TaskManager,
    session_id: str,
    name: str,
    args: ToolArguments,
    interrupt: asyncio.Event | None,
) -> str:
    if isinstance(args, TaskArguments):
        return await _task(manager, session_id, args)
    if isinstance(args, OutputArguments):
        return await _output(manager, session_id, args, interrupt)
    if isinstance(args, ListArguments):
        return format_list(await manager.list(session_id, status=args.status))
    if isinstance(args, CancelArguments):
        dropped: list[int] = []
        task = await manager.cancel(args.task_id, parent_session_id=session_id, dropped=dropped)
        return format_cancelled(task, sum(dropped))
    return format_cleared(await manager.clear(session_id))


async def run_tool(
    manager: TaskManager,
    session_id: str,
    name: str,
    arguments: Any,
    *,
    agent: str | None = None,
    interrupt: asyncio.Event | None = None,
) -> str:
    """Execute one tool call made by `session_id` (running as `agent`); always a text.

    `agent` is the calling session's agent as the agent server reports it; the manager needs
    none (a wake prompt runs as the parent's latest turn did), so it only goes to the log.

    `arguments` is what the model sent: a mapping, a JSON object string, or null for none;
    anything else is answered with an error text. When `interrupt` is set during a blocking
    asyncagents_output, the wait ends and the task's status is answered at once (a service
    that is stopping answers its calls in flight).
    """
    try:
        model = ARGUMENTS.get(name)
        if model is None:
            return _valid_unicode(format_unknown_tool(name))
        if not _is_text(session_id):
            return BAD_SESSION
        parsed = parse_arguments(name, arguments)
        if isinstance(parsed, str):
            return parsed
        try:
            args = model.model_validate(parsed)
        except ValidationError as exc:
            return format_bad_arguments(name, exc)
        text = await _dispatch(manager, session_id, name, args, interrupt)
    except StoreError:
        # its message names the store's file or DSN: for the service's log, not the agent
        log.exception("%s failed for session %r: the task store failed", name, session_id)
        text = format_store_failed(name)
    except TaskError as exc:
        text = f"Error: {_safe_str(exc)}"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("%s failed for session %r (agent %r)", name, session_id, agent)
        text = format_unexpected(name, exc)
    return _valid_unicode(text)
