"""The agent-facing side: tool definitions (name, description, JSON Schema) and their texts.

`run_tool` executes one tool call for the session that made it and always returns text: a
`TaskError` becomes its message, which tells the agent what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .errors import TaskError, TaskRequestError
from .models import OutputResult, Task, TaskStatus, now_ms

if TYPE_CHECKING:
    from .manager import TaskManager

#: the one default wait of asyncagents_output(block=true), in code and in its description
DEFAULT_OUTPUT_TIMEOUT_SECONDS = 120.0
#: the longest wait a caller may ask for
MAX_OUTPUT_TIMEOUT_SECONDS = 600.0

TASK = "asyncagents_task"
OUTPUT = "asyncagents_output"
LIST = "asyncagents_list"
CANCEL = "asyncagents_cancel"
CLEAR = "asyncagents_clear"
TOOL_NAMES: tuple[str, ...] = (TASK, OUTPUT, LIST, CANCEL, CLEAR)
EMPTY_LIST = "No background tasks found"


def disabled_tools() -> dict[str, bool]:
    """The ``tools`` body field that keeps a child from spawning tasks of its own."""
    return dict.fromkeys(TOOL_NAMES, False)


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
        "history; fork and resume cannot be combined. Children cannot start tasks themselves."
    ),
    parameters={
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "Full instructions for the sub-agent."},
            "agent": {"type": "string", "description": "Agent to run (new tasks)."},
            "description": {"type": "string", "description": "Short (3-5 words) task label."},
            "fork": {
                "type": "boolean",
                "default": False,
                "description": "Give the child a copy of this conversation's context.",
            },
            "resume": {
                "type": "string",
                "description": "Id of a completed task to continue with `prompt`.",
            },
        },
        "required": ["prompt"],
        "additionalProperties": False,
    },
)

OUTPUT_TOOL = ToolDefinition(
    name=OUTPUT,
    description=(
        "Read a background task: its status, and its result once it has ended; for a running "
        "task, its progress (tool calls so far, last activity). Non-blocking by default. "
        f"block=true waits until the task (or a resume) finishes, at most `timeout` seconds "
        f"(default {_T}); after a timeout the task keeps running and you can call again."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task_id": {"type": "string", "description": "The task id."},
            "block": {"type": "boolean", "default": False, "description": "Wait for the end."},
            "timeout": {
                "type": "number",
                "default": DEFAULT_OUTPUT_TIMEOUT_SECONDS,
                "minimum": 0,
                "maximum": MAX_OUTPUT_TIMEOUT_SECONDS,
                "description": f"Seconds to wait when block=true (default {_T}).",
            },
        },
        "required": ["task_id"],
        "additionalProperties": False,
    },
)

LIST_TOOL = ToolDefinition(
    name=LIST,
    description=(
        "List the background tasks started from this session, newest first, with their status. "
        "(forked) and (resumed) after an id mark forked and resumed tasks."
    ),
    parameters={
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "enum": [s.value for s in TaskStatus],
                "description": "Only tasks with this status.",
            }
        },
        "additionalProperties": False,
    },
)

CANCEL_TOOL = ToolDefinition(
    name=CANCEL,
    description="Cancel a running background task: its run is aborted and it ends as cancelled.",
    parameters={
        "type": "object",
        "properties": {"task_id": {"type": "string", "description": "The task id."}},
        "required": ["task_id"],
        "additionalProperties": False,
    },
)

CLEAR_TOOL = ToolDefinition(
    name=CLEAR,
    description=(
        "Remove every background task of this session: running ones are aborted, and their "
        "ids and results are gone (they cannot be read or resumed afterwards)."
    ),
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)

TOOLS: tuple[ToolDefinition, ...] = (TASK_TOOL, OUTPUT_TOOL, LIST_TOOL, CANCEL_TOOL, CLEAR_TOOL)


def _ago(ms: int | None, now: int) -> str:
    if ms is None:
        return "unknown"
    return f"{max(0.0, (now - ms) / 1000):.0f}s ago"


def format_started(task: Task) -> str:
    """Reply to asyncagents_task (launch or resume)."""
    if task.resume_count > 0 and task.status is TaskStatus.RESUMED:
        return (
            f"Follow-up sent to background task {task.label} ({task.agent}): {task.description}\n"
            "Status: resumed. You will get a notice with its full response when it answers. "
            f'To wait for it now, call asyncagents_output(task_id="{task.id}", block=true).'
        )
    return (
        f"Background task started: {task.label}\nAgent: {task.agent}\n"
        f"Description: {task.description}\nStatus: {task.status.value}\n"
        "You will get a notice in this session when it completes or fails; continue with "
        f'other work meanwhile. To wait for it now, call asyncagents_output(task_id="{task.id}",'
        " block=true)."
    )


def format_output(out: OutputResult) -> str:
    """Reply to asyncagents_output."""
    task = out.task
    now = now_ms()
    head = f"Task {task.label} [{task.status.value}] {task.agent}: {task.description}"
    if task.status.active:
        p = task.progress
        started = task.turn_started_at or task.created_at
        lines = [
            head,
            f"Running for {(now - started) / 1000:.0f}s; {p.tool_calls} tool call(s) so far"
            + (f" (last: {p.last_tool})" if p.last_tool else "")
            + f"; last activity {_ago(p.last_activity_at, now)}.",
        ]
        if out.timed_out:
            lines.insert(0, f"Still running after waiting {out.waited_seconds:.0f}s.")
        lines.append(
            "It is still working: continue with other work (you will get a notice), or call "
            "asyncagents_output again with block=true to wait."
        )
        return "\n".join(lines)
    if task.status is TaskStatus.COMPLETED:
        return f"{head}\n\nResult:\n{task.result or '(the task finished without a text reply)'}"
    if task.status is TaskStatus.ERROR:
        return f"{head}\n\nError: {task.error}\nStart a new asyncagents_task to try again."
    return f"{head}\n\nThe task was cancelled" + (f": {task.error}" if task.error else ".")


def format_list(tasks: list[Task]) -> str:
    """Reply to asyncagents_list: newest first, marks after the id."""
    if not tasks:
        return EMPTY_LIST
    lines = ["Background tasks (newest first):"]
    for task in tasks:
        lines.append(f"- {task.label} [{task.status.value}] {task.agent}: {task.description}")
    return "\n".join(lines)


def format_cancelled(task: Task) -> str:
    """Reply to asyncagents_cancel."""
    return f"Cancelled background task {task.label}: {task.description}"


def format_cleared(tasks: list[Task]) -> str:
    """Reply to asyncagents_clear."""
    if not tasks:
        return EMPTY_LIST
    aborted = sum(1 for t in tasks if t.status.active)
    return f"Cleared {len(tasks)} background task(s); {aborted} running one(s) aborted."


def _str(args: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None or value == "":
        if required:
            raise TaskRequestError(f"{key} is required.")
        return None
    if not isinstance(value, str):
        raise TaskRequestError(f"{key} must be a string.")
    return value


async def run_tool(
    manager: TaskManager, session_id: str, name: str, arguments: Mapping[str, Any]
) -> str:
    """Execute one tool call made by `session_id`; errors come back as the agent's text."""
    try:
        if name == TASK:
            resume = _str(arguments, "resume")
            prompt = _str(arguments, "prompt", required=True)
            assert prompt is not None
            task = await manager.task(
                session_id,
                prompt,
                _str(arguments, "agent", required=resume is None) or "",
                _str(arguments, "description", required=resume is None) or "",
                fork=bool(arguments.get("fork", False)),
                resume=resume,
            )
            return format_started(task)
        if name == OUTPUT:
            task_id = _str(arguments, "task_id", required=True)
            assert task_id is not None
            timeout = float(arguments.get("timeout", DEFAULT_OUTPUT_TIMEOUT_SECONDS))
            out = await manager.output(
                task_id,
                block=bool(arguments.get("block", False)),
                timeout=min(max(timeout, 0.0), MAX_OUTPUT_TIMEOUT_SECONDS),
                parent_session_id=session_id,
            )
            return format_output(out)
        if name == LIST:
            status = _str(arguments, "status")
            try:
                wanted = TaskStatus(status) if status else None
            except ValueError:
                raise TaskRequestError(
                    f"status must be one of {', '.join(s.value for s in TaskStatus)}."
                ) from None
            return format_list(await manager.list(session_id, status=wanted))
        if name == CANCEL:
            task_id = _str(arguments, "task_id", required=True)
            assert task_id is not None
            return format_cancelled(await manager.cancel(task_id, parent_session_id=session_id))
        if name == CLEAR:
            return format_cleared(await manager.clear(session_id))
        raise TaskRequestError(
            f"Unknown tool {name!r}; the task tools are {', '.join(TOOL_NAMES)}."
        )
    except TaskError as exc:
        return f"Error: {exc}"
