"""Pydantic models of OpenCode's message JSON (`GET /session/{id}/message`, opencode 1.18).

Shapes follow the recordings in shared/fixtures/opencode (see FORMAT.md). Unknown fields are
kept (``extra="allow"``) and unknown part types, tool states and roles validate into generic
models, so newer servers do not break older clients.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter


class _Open(BaseModel):
    """Base of every model here: tolerate and keep fields we do not know."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --- info ------------------------------------------------------------------------------------


class ModelRef(_Open):
    provider_id: str = Field(alias="providerID")
    model_id: str = Field(alias="modelID")


class MessageTime(_Open):
    created: float
    completed: float | None = None


class ErrorData(_Open):
    message: str | None = None


class MessageError(_Open):
    """``info.error`` of an assistant message, e.g. ``APIError`` or ``MessageAbortedError``."""

    name: str | None = None
    data: ErrorData | None = None


class UserInfo(_Open):
    id: str
    session_id: str | None = Field(default=None, alias="sessionID")
    role: Literal["user"] = "user"
    time: MessageTime | None = None
    agent: str | None = None
    model: ModelRef | None = None
    #: on user messages ``summary`` is an object of file diffs, not a flag
    summary: dict[str, Any] | None = None


class AssistantInfo(_Open):
    id: str
    session_id: str | None = Field(default=None, alias="sessionID")
    role: Literal["assistant"] = "assistant"
    parent_id: str | None = Field(default=None, alias="parentID")
    time: MessageTime | None = None
    model_id: str | None = Field(default=None, alias="modelID")
    provider_id: str | None = Field(default=None, alias="providerID")
    mode: str | None = None
    agent: str | None = None
    finish: str | None = None
    #: ``True`` on a compaction summary
    summary: bool | None = None
    error: MessageError | None = None


class OtherInfo(_Open):
    """A message whose role is neither user nor assistant."""

    id: str | None = None
    role: str | None = None


def _role_tag(value: Any) -> str:
    role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
    return role if role in ("user", "assistant") else "other"


Info = Annotated[
    Annotated[UserInfo, Tag("user")]
    | Annotated[AssistantInfo, Tag("assistant")]
    | Annotated[OtherInfo, Tag("other")],
    Discriminator(_role_tag),
]


# --- tool states -----------------------------------------------------------------------------


class ToolTime(_Open):
    start: float | None = None
    end: float | None = None
    #: set by OpenCode's prune: the model now sees ``[Old tool result content cleared]``
    compacted: float | None = None


class ToolStatePending(_Open):
    status: Literal["pending"] = "pending"
    input: Any = None
    raw: str | None = None


class ToolStateRunning(_Open):
    status: Literal["running"] = "running"
    input: Any = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    time: ToolTime | None = None


class ToolStateCompleted(_Open):
    status: Literal["completed"] = "completed"
    input: Any = None
    output: str = ""
    title: str | None = None
    metadata: dict[str, Any] | None = None
    time: ToolTime | None = None


class ToolStateError(_Open):
    status: Literal["error"] = "error"
    input: Any = None
    error: str = ""
    metadata: dict[str, Any] | None = None
    time: ToolTime | None = None


class ToolStateOther(_Open):
    status: str | None = None


def _status_tag(value: Any) -> str:
    status = value.get("status") if isinstance(value, dict) else getattr(value, "status", None)
    return status if status in ("pending", "running", "completed", "error") else "other"


ToolState = Annotated[
    Annotated[ToolStatePending, Tag("pending")]
    | Annotated[ToolStateRunning, Tag("running")]
    | Annotated[ToolStateCompleted, Tag("completed")]
    | Annotated[ToolStateError, Tag("error")]
    | Annotated[ToolStateOther, Tag("other")],
    Discriminator(_status_tag),
]


# --- parts -----------------------------------------------------------------------------------


class _PartBase(_Open):
    id: str | None = None
    session_id: str | None = Field(default=None, alias="sessionID")
    message_id: str | None = Field(default=None, alias="messageID")


class TextPart(_PartBase):
    type: Literal["text"] = "text"
    text: str = ""
    synthetic: bool | None = None
    #: ignored text never reaches the model, so it is not forked either
    ignored: bool | None = None


class ReasoningPart(_PartBase):
    type: Literal["reasoning"] = "reasoning"
    text: str = ""


class ToolPart(_PartBase):
    """A tool call and its result in one part (there are no ``tool_result`` parts in OpenCode)."""

    type: Literal["tool"] = "tool"
    call_id: str | None = Field(default=None, alias="callID")
    tool: str | None = None
    state: ToolState | None = None


class ToolResultPart(_PartBase):
    """The legacy result part of the older plugin's message shape."""

    type: Literal["tool_result"] = "tool_result"
    text: str = ""
    tool: str | None = None
    name: str | None = None


class CompactionPart(_PartBase):
    type: Literal["compaction"] = "compaction"
    auto: bool | None = None
    overflow: bool | None = None
    #: first message kept verbatim after the compaction (the "tail")
    tail_start_id: str | None = None


class StepStartPart(_PartBase):
    type: Literal["step-start"] = "step-start"
    snapshot: str | None = None


class StepFinishPart(_PartBase):
    type: Literal["step-finish"] = "step-finish"
    reason: str | None = None


class PatchPart(_PartBase):
    type: Literal["patch"] = "patch"
    hash: str | None = None
    files: list[str] = []


class OtherPart(_PartBase):
    """Any part type this package does not model (file, subtask, agent, snapshot, retry, …)."""

    type: str


_PART_TAGS = (
    "text",
    "reasoning",
    "tool",
    "tool_result",
    "compaction",
    "step-start",
    "step-finish",
    "patch",
)


def _type_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _PART_TAGS else "other"


Part = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ReasoningPart, Tag("reasoning")]
    | Annotated[ToolPart, Tag("tool")]
    | Annotated[ToolResultPart, Tag("tool_result")]
    | Annotated[CompactionPart, Tag("compaction")]
    | Annotated[StepStartPart, Tag("step-start")]
    | Annotated[StepFinishPart, Tag("step-finish")]
    | Annotated[PatchPart, Tag("patch")]
    | Annotated[OtherPart, Tag("other")],
    Discriminator(_type_tag),
]


class Message(_Open):
    """One entry of ``GET /session/{id}/message``: ``{info, parts}``."""

    info: Info
    parts: list[Part] = []


#: Validates a whole message list: ``MESSAGES.validate_json(raw_bytes)`` or ``validate_python``.
MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def parse_messages(data: bytes | str | list[Any]) -> list[Message]:
    """Validate a message list from JSON bytes/str or from dicts."""
    if isinstance(data, bytes | str):
        return MESSAGES.validate_json(data)
    return MESSAGES.validate_python(data)
