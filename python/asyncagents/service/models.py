"""The task API's query parameters and answers as pydantic models: the routes parse and answer
with them, and the OpenAPI document (`openapi`) is generated from their JSON schemas.

A query model validates the parameters as strings (what a URL holds); each rule's message is the
text of the 400 answer, after ``query parameter '<name>': `` (`parse_query`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    computed_field,
    model_validator,
)
from pydantic_core import PydanticCustomError
from starlette.requests import Request

from ..tasks.models import Task as StoredTask
from ..tasks.models import TaskStatus, TaskUsage
from ..tasks.queries import DurationSummary, SortField, UsageSums
from .errors import bad_param

SORTS = ("-created_at", "created_at", "-updated_at", "updated_at")
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
MAX_MESSAGE_LIMIT = 10_000

Q = TypeVar("Q", bound="Query")


def _bad(message: str) -> PydanticCustomError:
    return PydanticCustomError("bad_param", message)


def _int_in(lo: int, hi: int) -> Any:
    """A whole number from lo to hi, given as decimal text."""

    def check(raw: Any) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise _bad(f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise _bad(f"{value} is out of range {lo}..{hi}")
        return value

    schema = {"type": "integer", "minimum": lo, "maximum": hi}
    return Annotated[int, BeforeValidator(check), WithJsonSchema(schema)]


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("", "false", "0", "no"):
        return False
    if text in ("true", "1", "yes"):
        return True
    raise _bad(f"{raw!r} is not a boolean (true or false)")


def _statuses(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    out: list[str] = []
    for item in raw.split(","):
        try:
            out.append(TaskStatus(item.strip()).value)
        except ValueError:
            known = ", ".join(s.value for s in TaskStatus)
            raise _bad(f"{item.strip()!r} is not one of {known}") from None
    return ",".join(sorted(set(out), key=out.index))


def _sort(raw: Any) -> Any:
    if raw not in SORTS:
        raise _bad(f"{raw!r} is not one of {', '.join(SORTS)}")
    return raw


class Query(BaseModel):
    """Query parameters: each at most once, none unknown; an empty value is no value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def parse(cls: type[Q], request: Request) -> Q:
        """The request's query as this model, or a 400 `ApiError` naming the parameter."""
        params = request.query_params
        allowed = list(cls.model_fields)
        for key in params:
            if key not in allowed:
                raise bad_param(key, f"unknown; this route takes {', '.join(allowed) or 'none'}")
            if len(params.getlist(key)) > 1:
                raise bad_param(key, "given more than once")
        given = {k: v for k, v in params.items() if v != ""}
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            name = str(first["loc"][0]) if first["loc"] else "query"
            raise bad_param(name, first["msg"]) from None


class NoQuery(Query):
    """A route that takes no query parameters."""


class TaskListQuery(Query):
    """``GET /v1/tasks``: filters, order and page."""

    parent: str | None = Field(default=None, description="Only tasks of this parent session id.")
    status: Annotated[str | None, BeforeValidator(_statuses)] = Field(
        default=None,
        description="Only these statuses, comma-separated: "
        + ", ".join(s.value for s in TaskStatus),
    )
    agent: str | None = Field(default=None, description="Only tasks of this agent.")
    q: str | None = Field(
        default=None,
        description="Case-insensitive text in the id, description, prompt, result or error "
        "(their first 4,000 characters).",
    )
    sort: Annotated[
        Literal["-created_at", "created_at", "-updated_at", "updated_at"],
        BeforeValidator(_sort),
    ] = Field(default="-created_at", description="Order (default -created_at: newest first).")
    limit: _int_in(1, MAX_LIMIT) = Field(  # type: ignore[valid-type]
        default=DEFAULT_LIMIT, description="Page size (default 100)."
    )
    cursor: str | None = Field(
        default=None, description="`next_cursor` of the previous page (opaque)."
    )

    @model_validator(mode="after")
    def _cursor_fits(self) -> TaskListQuery:
        if self.cursor is not None:
            Cursor.decode(self.cursor, self.sort)  # a 400 now, before the store is read
        return self

    @property
    def statuses(self) -> set[TaskStatus] | None:
        return None if self.status is None else {TaskStatus(s) for s in self.status.split(",")}

    @property
    def sort_field(self) -> SortField:
        return "updated_at" if self.sort.endswith("updated_at") else "created_at"

    @property
    def after(self) -> tuple[int, str] | None:
        if self.cursor is None:
            return None
        mark = Cursor.decode(self.cursor, self.sort)
        return mark.key, mark.id


class MessagesQuery(Query):
    """``GET /v1/tasks/{task_id}/messages``: which messages, as the output tool chooses them."""

    full_session: Annotated[bool, BeforeValidator(_boolean)] = Field(
        default=False,
        description="The whole conversation (with the fork context), not the current turn's.",
    )
    since_message_id: str | None = Field(
        default=None, description="Only the messages after this one."
    )
    message_limit: _int_in(0, MAX_MESSAGE_LIMIT) | None = Field(  # type: ignore[valid-type]
        default=None, description="Only the newest this many of the chosen messages."
    )


class StatsQuery(Query):
    """``GET /v1/stats``."""

    parent: str | None = Field(default=None, description="Only tasks of this parent session id.")


class Cursor(BaseModel):
    """Where a page ended: the sort, and the last task's sort key and id (opaque to clients)."""

    model_config = ConfigDict(frozen=True)

    sort: str
    key: int
    id: str

    def encode(self) -> str:
        raw = json.dumps([self.sort, self.key, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, sort: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            s, key, task_id = json.loads(raw)
            if not (isinstance(s, str) and isinstance(key, int) and isinstance(task_id, str)):
                raise ValueError
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError):
            raise bad_param("cursor", "not a cursor this service returned") from None
        if s != sort:
            raise bad_param("cursor", f"made for sort={s}, not sort={sort}")
        return cls(sort=s, key=key, id=task_id)


# -- answers ------------------------------------------------------------------------------------


class Task(StoredTask):
    """A task as the API shows it: the stored fields, and its id with the seed's marks."""

    @computed_field(description="The id with (forked) and (resumed) marks.")  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        return StoredTask.label.fget(self)  # type: ignore[attr-defined,no-any-return]

    @classmethod
    def of(cls, task: StoredTask) -> Task:
        # its fields are valid already (nested models are taken as they are); validating the
        # field dict in pydantic-core is ten times faster than `model_construct`
        return cls.model_validate(task.__dict__)


class TaskDetail(Task):
    """One task, with how long its last turn ran."""

    duration_ms: int | None = Field(
        description="How long the last turn ran (ms); null while it runs."
    )
    parent_title: str | None = Field(
        description="The parent session's title as its server names it; null when it cannot "
        "be read now (show `parent_session_id`)."
    )


class TaskPage(BaseModel):
    """One page of tasks."""

    tasks: list[Task]
    total: int = Field(description="Tasks matching the filters, on every page.")
    usage: TaskUsage = Field(description="Tokens and cost of every task matching the filters.")
    next_cursor: str | None = Field(description="Give it as `cursor` for the next page.")


class MessagePart(BaseModel):
    """A readable part of a message: text, reasoning, a tool call, or another kind in one line."""

    type: str
    text: str | None = None
    tool: str | None = None
    status: str | None = None
    input: Any = None
    output: str | None = None
    truncated: bool = Field(description="The text (or output) was cut at 20,000 characters.")


class MessageView(BaseModel):
    """One message of the child's conversation."""

    id: str | None
    role: str | None
    agent: str | None
    created_at: int | None
    error: str | None
    parts: list[MessagePart] = Field(
        description="Readable parts: text and reasoning (and other kinds, in one line) carry "
        "`text`; tool calls `tool`, `status`, `input`, `output`; only those fields are sent."
    )


class Conversation(BaseModel):
    """The messages of a task's child session, chosen as the query asked."""

    task_id: str
    session_id: str | None
    messages: list[MessageView]


class ToolCalls(BaseModel):
    total: int
    by_name: dict[str, int] = Field(description="Calls by tool name, most used first.")
    unreadable_tasks: int = Field(
        description="Tasks whose tool names were not recorded (ended before they were kept)."
    )


class Stats(BaseModel):
    """Counts over the tasks (of one parent, when asked)."""

    tasks: int
    by_status: dict[str, int]
    by_agent: dict[str, int]
    tool_calls: ToolCalls
    durations: DurationSummary
    usage: UsageSums = Field(
        description="Tokens and cost: `total`, and `by_agent`, `by_model` (provider/model), "
        "`by_parent` (parent session) and `by_tree` (top-level session), each a map to a "
        "TaskUsage."
    )


class Error(BaseModel):
    """Every error answer."""

    error: str = Field(description="A short code: bad_request, unauthorized, not_found, ...")
    detail: str = Field(description="What went wrong, for a person.")
