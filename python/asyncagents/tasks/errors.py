"""Typed errors of the task manager: each message tells the calling agent what to do next."""

from __future__ import annotations

from .markdown import code


class TaskError(Exception):
    """Base of every error the task tools report to an agent; `str(err)` is the agent text."""


class TaskRequestError(TaskError, ValueError):
    """A tool call the manager refuses as asked (bad or conflicting arguments)."""


class TreeBudgetSpentError(TaskRequestError):
    """The tasks of the caller's tree have used up `max_cost`: no task starts in it any more."""

    def __init__(self, root: str, cost: str, limit: str) -> None:
        super().__init__(
            f"the tasks of session `{root}` have cost {cost} together, which reaches this "
            f"service's max_cost of {limit}; no more tasks can start or resume in this tree."
        )


class ForkResumeConflictError(TaskRequestError):
    """`fork` and `resume` were both given: a resumed task already has its own history."""

    def __init__(self) -> None:
        super().__init__(
            "fork and resume are mutually exclusive: resume continues the task's own session "
            "(which already has its history), fork starts a new task with a copy of your "
            "context. Call asyncagents_task again with only one of them."
        )


class TaskNotFoundError(TaskError, LookupError):
    """No task with this id (never existed, cleared, or belongs to another session)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"No background task with id {code(task_id)}. Call asyncagents_list to see the ids of "
            "your tasks; cleared tasks are gone."
        )
        self.task_id = task_id


class AmbiguousTaskIdError(TaskRequestError):
    """A task id prefix that matches more than one task."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        super().__init__(
            f"Task id {code(prefix)} is ambiguous; it matches several tasks: "
            f"{', '.join(code(c) for c in candidates)}. Give more characters of the id."
        )
        self.prefix = prefix
        self.candidates = list(candidates)


class TaskNotCompletedError(TaskRequestError):
    """Resume of a task that is not `completed` (running, failed or cancelled)."""

    def __init__(self, task_id: str, status: str) -> None:
        if status in ("running", "queued"):
            hint = (
                f"It is still {status}: wait for its completion notice or call asyncagents_output "
                f"with task_id {code(task_id)} and block=true, then resume it."
            )
        else:
            hint = (
                f"It ended as {status}; start a new asyncagents_task (fork=true if it needs "
                "your context) instead."
            )
        super().__init__(
            f"Only completed tasks can be resumed; task {code(task_id)} is {status}. {hint}"
        )
        self.task_id = task_id
        self.status = status


class TaskBeingResumedError(TaskRequestError):
    """Resume of a task whose previous resume has not answered yet."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"Task {code(task_id)} is currently being resumed and has not answered yet. Wait "
            f"for the notice, or call asyncagents_output with task_id {code(task_id)} and "
            "block=true, then resume it again."
        )
        self.task_id = task_id


class SessionExpiredError(TaskRequestError):
    """Resume of a task whose child session no longer exists on the server."""

    def __init__(self, task_id: str, session_id: str | None) -> None:
        session = f"its session {code(session_id)}" if session_id else "its session"
        super().__init__(
            f"Cannot resume task {code(task_id)}: {session} no longer exists. Start a new "
            "asyncagents_task with the full instructions (fork=true to pass your context)."
        )
        self.task_id = task_id
        self.session_id = session_id


class TaskNotRunningError(TaskRequestError):
    """Cancel of a task that has already ended."""

    def __init__(self, task_id: str, status: str) -> None:
        super().__init__(
            f"Task {code(task_id)} is {status}, not running; there is nothing to cancel. Use "
            "asyncagents_output to read it or asyncagents_clear to remove your tasks."
        )
        self.task_id = task_id
        self.status = status


class QueueFullError(TaskRequestError):
    """A new task of a parent that has `max_queued_per_parent` tasks waiting already."""

    def __init__(self, queued: int, cap: int) -> None:
        super().__init__(
            f"Not started: this session already has {queued} background tasks waiting in the "
            f"queue (max_queued_per_parent {cap}). Wait for some to finish, or cancel some "
            "with asyncagents_cancel, then try again."
        )
        self.queued = queued
        self.cap = cap


class TaskDepthError(TaskRequestError):
    """A task asked for by a session that is itself too deep in a tree of tasks."""

    def __init__(self, depth: int, max_depth: int) -> None:
        super().__init__(
            f"Not started: this session is a background task at depth {depth}, and tasks may "
            f"nest only {max_depth} level(s) deep (max_depth {max_depth}). Do the work "
            "yourself, or report back to your parent so it can start the task."
        )
        self.depth = depth
        self.max_depth = max_depth


class StoreError(TaskError):
    """The task store failed (unreachable, full, read-only, corrupt, or not ours).

    The message names the file or the DSN (without its password) and what failed.
    """


class BackendError(TaskError):
    """The session server failed a call; nothing was changed on our side, a retry may work.

    `url` and `method` name the request (None for in-process backends), `status_code` the HTTP
    status when there was one.
    """

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        *,
        url: str | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.url = url
        self.method = method


class BackendUnavailableError(BackendError):
    """The session server cannot be reached (down, refused, timed out)."""


class BackendTimeoutError(BackendUnavailableError):
    """A call passed its overall deadline (connect + send + the whole body), or the event
    stream was silent for longer than its idle timeout."""

    def __init__(
        self, message: str, *, timeout: float, url: str | None = None, method: str | None = None
    ) -> None:
        super().__init__(message, url=url, method=method)
        self.timeout = timeout


class BackendHTTPError(BackendError):
    """The server (or a proxy before it) answered an error status that is not OpenCode's own
    confirmed not-found answer: an HTML 404 page, a 5xx, another JSON error."""


class BackendAuthError(BackendError):
    """The server refused our credentials (HTTP 401 or 403): a setup problem that no retry
    fixes. The message says which credentials to set, and where; it never holds a password."""


class BackendProtocolError(BackendError):
    """The server answered something the client cannot use: a body that is not the JSON
    expected, a redirect, a body over its size cap."""


class BackendRedirectError(BackendProtocolError):
    """The server answered a redirect (3xx); redirects are refused, never followed."""

    def __init__(
        self,
        message: str,
        status_code: int,
        *,
        location: str | None,
        url: str | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message, status_code, url=url, method=method)
        self.location = location


class BackendResponseTooLargeError(BackendProtocolError):
    """A response body, or one line or event of the event stream, passed its size cap; the
    read stopped there (`received` bytes, at most one network chunk over `limit`)."""

    def __init__(
        self,
        message: str,
        *,
        limit: int,
        received: int,
        url: str | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message, url=url, method=method)
        self.limit = limit
        self.received = received


class SessionNotFoundError(BackendError):
    """The server has no such session: OpenCode's own ``NotFoundError`` answer (HTTP 404),
    confirmed by a second read of the session."""

    def __init__(
        self,
        session_id: str,
        message: str | None = None,
        *,
        url: str | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message or f"Session not found: {session_id}", 404, url=url, method=method)
        self.session_id = session_id


class UnknownMessageError(TaskRequestError):
    """A `since_message_id` that is not a message of the task's session."""

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"since_message_id {message_id!r} is not a message of this task's session; use an "
            "id from a [msg_...] header of an earlier output."
        )
        self.message_id = message_id
