"""Typed arguments of the five task tools: one pydantic model per tool.

Models send arguments loosely: booleans as ``"true"``/``"false"``, numbers as strings, ``null``
for "not given", the whole object as a JSON string. These models read those as meant and refuse
everything else with a problem per field (`describe_problems`), never guessing: ``"false"`` is
False, NaN and infinities are refused, unknown keys are refused. Each model's JSON Schema is the
``parameters`` the agent server shows the model (`tool_parameters`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from ..plain import surrogate_free
from .models import TaskLimits, TaskStatus
from .tool_names import DEFAULT_OUTPUT_TIMEOUT_SECONDS

#: the longest wait a caller may ask for
MAX_OUTPUT_TIMEOUT_SECONDS = 600.0
#: the most messages asyncagents_output returns at once
MAX_MESSAGE_LIMIT = 1000
#: the longest text argument (a prompt with its full instructions fits easily)
MAX_TEXT_CHARS = 1_000_000

_T = int(DEFAULT_OUTPUT_TIMEOUT_SECONDS)


def _problem(message: str) -> PydanticCustomError:
    return PydanticCustomError("tool_argument", message)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _problem("must be a string")
    if len(value) > MAX_TEXT_CHARS:
        raise _problem(f"is longer than {MAX_TEXT_CHARS} characters")
    if not surrogate_free(value):
        raise _problem("must be valid Unicode text (it holds a lone surrogate)")
    return value


def _optional_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return _text(value)


def _flag(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _problem("must be true or false")


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _problem("must be a number")
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except ValueError:
        raise _problem("must be a number") from None
    except OverflowError:
        raise _problem("must be a finite number") from None
    if not math.isfinite(number):
        raise _problem("must be a finite number")
    return number


def _seconds(value: Any) -> float:
    if value is None:
        return DEFAULT_OUTPUT_TIMEOUT_SECONDS
    seconds = _number(value)
    if not 0 <= seconds <= MAX_OUTPUT_TIMEOUT_SECONDS:
        raise _problem(f"must be between 0 and {MAX_OUTPUT_TIMEOUT_SECONDS:.0f} seconds")
    return seconds


def _count(value: Any) -> int | None:
    if value is None:
        return None
    number = _number(value)
    if not number.is_integer():
        raise _problem("must be a whole number")
    if not 1 <= number <= MAX_MESSAGE_LIMIT:
        raise _problem(f"must be between 1 and {MAX_MESSAGE_LIMIT}")
    return int(number)


def _status(value: Any) -> TaskStatus | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return TaskStatus(value.strip().lower())
        except ValueError:
            pass
    raise _problem(f"must be one of {', '.join(s.value for s in TaskStatus)}")


def _positive(value: Any) -> float | None:
    if value is None or value == "":
        return None
    number = _number(value)
    if number <= 0:
        raise _problem("must be more than 0")
    return number


def _positive_count(value: Any) -> int | None:
    number = _positive(value)
    if number is None:
        return None
    if not number.is_integer():
        raise _problem("must be a whole number")
    return int(number)


#: the longest model name (``provider/model``) a call may give
MAX_MODEL_CHARS = 300


def _model(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _problem("must be a string written provider/model")
    if len(value) > MAX_MODEL_CHARS:
        raise _problem(f"is longer than {MAX_MODEL_CHARS} characters")
    if not surrogate_free(value):
        raise _problem("must be valid Unicode text (it holds a lone surrogate)")
    return value.strip()


def _fork_turns(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "all")):
        return None
    try:
        number = _number(value)
    except PydanticCustomError:
        raise _problem('must be "all" or a whole number of at least 1') from None
    if not number.is_integer() or number < 1:
        raise _problem('must be "all" or a whole number of at least 1')
    if number > MAX_MESSAGE_LIMIT:
        raise _problem(f"must be at most {MAX_MESSAGE_LIMIT}")
    return int(number)


def _when(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() in ("after_current", "now"):
        return value.strip().lower()
    raise _problem('must be "after_current" or "now"')


Text = Annotated[str, BeforeValidator(_text)]
OptionalText = Annotated[str | None, BeforeValidator(_optional_text)]
Flag = Annotated[bool, BeforeValidator(_flag)]
Seconds = Annotated[float, BeforeValidator(_seconds)]
Count = Annotated[int | None, BeforeValidator(_count)]
Positive = Annotated[float | None, BeforeValidator(_positive)]
PositiveCount = Annotated[int | None, BeforeValidator(_positive_count)]


class ToolArguments(BaseModel):
    """Base of the argument models: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskArguments(ToolArguments):
    """asyncagents_task: launch a task, or resume one."""

    prompt: Text = Field(description="Full instructions for the sub-agent.")
    agent: OptionalText = Field(default=None, description="Agent to run (required for a new task).")
    description: OptionalText = Field(default=None, description="Short (3-5 words) task label.")
    fork: Flag = Field(
        default=False, description="Give the child a copy of this conversation's context."
    )
    resume: OptionalText = Field(
        default=None, description="Id of a completed task to continue with `prompt`."
    )
    max_runtime: Positive = Field(
        default=None,
        json_schema_extra={"exclusiveMinimum": 0},
        description="Stop the task when one turn runs longer than this many seconds "
        "(lowers the service's limit; cannot raise it).",
    )
    max_tool_calls: PositiveCount = Field(
        default=None,
        json_schema_extra={"minimum": 1},
        description="Stop the task when one turn makes more tool calls than this (lowers the "
        "service's limit).",
    )
    max_cost: Positive = Field(
        default=None,
        json_schema_extra={"exclusiveMinimum": 0},
        description="Stop the task when it has cost more than this many USD (lowers the "
        "service's limit).",
    )
    max_tokens: PositiveCount = Field(
        default=None,
        json_schema_extra={"minimum": 1},
        description="Stop the task when it has used more tokens than this (lowers the "
        "service's limit).",
    )

    @property
    def limits(self) -> TaskLimits | None:
        """The limits the call asked for, or None when it asked for none."""
        asked = TaskLimits(
            max_runtime=self.max_runtime,
            max_tool_calls=self.max_tool_calls,
            max_cost=self.max_cost,
            max_tokens=self.max_tokens,
        )
        return asked if asked != TaskLimits() else None

    when: Annotated[
        str | None,
        BeforeValidator(_when),
        WithJsonSchema({"type": "string", "enum": ["after_current", "now"]}),
    ] = Field(
        default=None,
        description=(
            "With resume, for a task still running: after_current sends the follow-up when its "
            "current turn ends, now aborts that turn and sends it at once."
        ),
    )
    model: Annotated[str | None, BeforeValidator(_model)] = Field(
        default=None,
        description=(
            "Model for a new task, written provider/model (default: the configured model, "
            "else the server's default)."
        ),
    )
    fork_turns: Annotated[
        int | None,
        BeforeValidator(_fork_turns),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "enum": ["all"]},
                    {"type": "integer", "minimum": 1, "maximum": MAX_MESSAGE_LIMIT},
                ]
            }
        ),
    ] = Field(
        default=None,
        description=(
            'With fork=true: "all" (the default) or N, to give only your last N user turns '
            "and what followed them."
        ),
    )


class OutputArguments(ToolArguments):
    """asyncagents_output: status and result, optionally the child's conversation."""

    task_id: Text = Field(description="The task id (or a unique prefix of it).")
    block: Flag = Field(default=False, description="Wait for the end of the task's run.")
    timeout: Seconds = Field(
        default=DEFAULT_OUTPUT_TIMEOUT_SECONDS,
        json_schema_extra={"minimum": 0, "maximum": MAX_OUTPUT_TIMEOUT_SECONDS},
        description=f"Seconds to wait when block=true (default {_T}).",
    )
    full_session: Flag = Field(
        default=False, description="Also return the child's whole conversation."
    )
    since_message_id: OptionalText = Field(
        default=None,
        description="Also return the child's messages after this message id.",
    )
    message_limit: Count = Field(
        default=None,
        json_schema_extra={"minimum": 1, "maximum": MAX_MESSAGE_LIMIT},
        description="Also return (at most) this many of the child's latest messages.",
    )

    @property
    def wants_conversation(self) -> bool:
        """Whether any part of the child's conversation was asked for."""
        return (
            self.full_session or self.since_message_id is not None or self.message_limit is not None
        )


class ListArguments(ToolArguments):
    """asyncagents_list: the caller's tasks."""

    status: Annotated[TaskStatus | None, BeforeValidator(_status)] = Field(
        default=None, description="Only tasks with this status."
    )


class CancelArguments(ToolArguments):
    """asyncagents_cancel: abort a running task."""

    task_id: Text = Field(description="The task id (or a unique prefix of it).")


class ClearArguments(ToolArguments):
    """asyncagents_clear: takes no arguments."""


def _clean(schema: Any) -> Any:
    """Pydantic's schema as a model reads it best: no titles, ``X | None`` shown as X."""
    if isinstance(schema, dict):
        out = {k: _clean(v) for k, v in schema.items() if k != "title"}
        options = out.get("anyOf")
        if isinstance(options, list):
            kept = [o for o in options if o != {"type": "null"}]
            if len(kept) == 1 and len(kept) < len(options):
                del out["anyOf"]
                out = {**kept[0], **out}
        if out.get("default", 0) is None:
            del out["default"]
        return out
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with every ``$ref`` to `defs` replaced by the definition (no description)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = {k: v for k, v in defs[ref.split("/")[-1]].items() if k != "description"}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inline({**target, **rest}, defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def tool_parameters(model: type[ToolArguments]) -> dict[str, Any]:
    """The JSON Schema of `model`'s arguments, as the tool's ``parameters``."""
    raw = model.model_json_schema()
    schema = _clean(_inline(raw, raw.pop("$defs", {})))
    schema.pop("description", None)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    cleaned: dict[str, Any] = schema
    return cleaned


def _preview(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_problems(tool: str, model: type[ToolArguments], exc: ValidationError) -> str:
    """Every validation problem of a call to `tool`, one line each, naming the field."""
    names = ", ".join(model.model_fields) or "none"
    lines = [f"Error: invalid arguments for {tool}:"]
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        kind = err["type"]
        if kind == "missing":
            lines.append(f"- {field}: required")
        elif kind == "extra_forbidden":
            lines.append(f"- {field}: not an argument of {tool} (its arguments: {names})")
        else:
            lines.append(f"- {field}: {err['msg']} (got {_preview(err.get('input'))})")
    return "\n".join(lines)


def parse_arguments(tool: str, arguments: Any) -> Mapping[str, Any] | str:
    """The arguments as a mapping, or an error text: a JSON object string is parsed, null is
    "no arguments", anything else is refused."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            return f"Error: the arguments of {tool} are not valid JSON ({exc})."
    if not isinstance(arguments, Mapping):
        kind = "a list" if isinstance(arguments, (list, tuple)) else type(arguments).__name__
        return (
            f"Error: the arguments of {tool} must be a JSON object of named arguments, not {kind}."
        )
    if not all(isinstance(k, str) for k in arguments):
        return f"Error: the argument names of {tool} must be strings."
    return arguments
