"""`build_fork_context`: the public entry of the fork pipeline, for both engines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from . import _core
from .config import DEFAULT_CONFIG, ForkConfig
from .errors import ForkInputError
from .models import Message
from .plain import plain_dict, plain_seq
from .preamble import cached_preamble
from .stats import ForkStats, built, engine_stats

Engine = Literal["rust", "python"]
MessagesInput = bytes | bytearray | memoryview | str | Sequence[Any] | dict[str, Any]


class ForkContext(BaseModel):
    """What to inject into a forked child session, and what was cut to make it fit."""

    model_config = ConfigDict(frozen=True)

    #: ``preamble + "\n\n" + context``, or ``""`` when there is nothing to inject
    text: str
    preamble: str
    #: ``"<inherited_context>…\n</inherited_context>"`` or ``""``
    context: str
    stats: ForkStats


def build_fork_context(
    messages: MessagesInput,
    config: ForkConfig | None = None,
    engine: Engine = "rust",
) -> ForkContext:
    """Cut a parent session down to a context a forked child can inherit.

    `messages` is the JSON of ``GET /session/{id}/message`` or an ``opencode export`` document,
    as ``bytes`` or ``str``, or the parsed list of message dicts, or a list of `Message`.
    ``engine="rust"`` runs the Rust core; ``engine="python"`` the pure-Python reference, which
    gives the same answer. Raises `ForkInputError` (a ``ValueError``) naming the bad field of
    `messages`; a `config` that skipped validation (``ForkConfig.model_construct``) is validated
    first (pydantic's ``ValidationError`` names its field).
    """
    if config is None:
        config = DEFAULT_CONFIG
    elif isinstance(config, ForkConfig):
        config = config.checked()
    else:
        raise TypeError(f"config must be a ForkConfig, not {type(config).__name__}")
    if engine == "rust":
        original_count, out = _run_rust(messages, config)
    elif engine == "python":
        original_count, out = _run_python(messages, config)
    else:
        raise ValueError(f'engine must be "rust" or "python", not {engine!r}')
    context = out[0]
    stats = engine_stats(original_count, out)
    if not context:
        return built(ForkContext, {"text": "", "preamble": "", "context": "", "stats": stats})
    # the counts the preamble says (removed_messages to compaction_detected, turn_removed)
    preamble = cached_preamble(stats, config, out[14], (out[4:12], out[14]))
    return built(
        ForkContext,
        {
            "text": f"{preamble}\n\n{context}",
            "preamble": preamble,
            "context": context,
            "stats": stats,
        },
    )


#: what an engine returns: ``(context, final_count, total_chars, truncated_results,
#: removed_messages, tier1, tier2, tier3, head_tail_applied, compacted_results, hard_capped,
#: compaction_detected, compaction_slice_index, compaction_tail_messages, turn_removed)``
_Out = tuple[Any, ...]


#: a list of exact dicts holds no model: checked at C level (`isinstance` of a pydantic model
#: class runs its metaclass's Python `__instancecheck__`, 0.3 us a message)
_PLAIN = frozenset({dict})


def _objects(messages: MessagesInput) -> Sequence[Any]:
    """The message list of parsed input for the reference; `Message` models become dicts."""
    from .reference.session import message_list

    items = message_list(messages)
    if _PLAIN.issuperset(map(type, items)):
        return items
    dumped = _models_dumped(items)
    return items if dumped is None else dumped


def _without_models(document: Any) -> list[Any] | dict[str, Any] | None:
    """`document` (a message list or an export dict) with its `Message` models dumped to dicts;
    None when it holds no model. Containers are read by their contents, as the Rust walk
    reads them, never through methods a subclass overrides."""
    if isinstance(document, dict):
        messages = dict.get(document, "messages")
        dumped = _without_models(messages) if isinstance(messages, list | tuple) else None
        return None if dumped is None else {**plain_dict(document), "messages": dumped}
    if not isinstance(document, list | tuple):
        return None
    return _models_dumped(plain_seq(document))


def _models_dumped(items: Sequence[Any]) -> list[Any] | None:
    """`items` with each `Message` model dumped to a dict; None when it holds no model."""
    if not any(isinstance(item, Message) for item in items):
        return None
    return [_dump(item) if isinstance(item, Message) else item for item in items]


def _dump(message: Message) -> dict[str, Any]:
    """A model as the dict it came from: unset fields stay absent (``state.input`` matters)."""
    data = message.model_dump(by_alias=True, exclude_unset=True)
    data.setdefault("parts", [])
    return data


#: the input types read as JSON text (a tuple: `isinstance` of a union is slower)
_TEXT_TYPES = (bytes, bytearray, memoryview, str)


def _is_text(messages: MessagesInput) -> bool:
    return isinstance(messages, _TEXT_TYPES)


def _run_python(messages: MessagesInput, config: ForkConfig) -> tuple[int, _Out]:
    from .reference import run_reference
    from .reference.session import load_json, message_list

    if _is_text(messages):
        data = bytes(messages) if isinstance(messages, bytearray | memoryview) else messages
        items = message_list(load_json(data))  # type: ignore[arg-type]
    else:
        items = _objects(messages)
    sliced, counts, fitted = run_reference(items, config)
    out = (
        fitted.context, fitted.final_count, len(fitted.context), counts.truncated,
        fitted.removed, counts.tier1, counts.tier2, counts.tier3, counts.head_tail,
        counts.compacted, fitted.hard_capped, sliced.detected, sliced.slice_index,
        sliced.tail_messages, sliced.turn_removed,
    )  # fmt: skip
    return len(items), out


def _run_rust(messages: MessagesInput, config: ForkConfig) -> tuple[int, _Out]:
    """All three stages in the engine (`ParsedSession.fork`); stage 1 there follows the rules
    of `compaction.py`, which the reference runs."""
    if _is_text(messages):
        data = bytes(messages) if isinstance(messages, bytearray | memoryview) else messages
        session = _core.parse_json(data)  # type: ignore[arg-type]
        out = session.fork(config)
    else:
        objects: Any = messages
        try:
            # plain dicts, the common case: no Python-side pass over the list at all
            session = _core.from_objects(objects)
        except ForkInputError:
            objects = _without_models(messages)
            if objects is None:
                raise
            session = _core.from_objects(objects)
        out = session.fork(config)
        if out is None:
            # stage 1 keeps a message older than the boundary the walk read bodies down to (a
            # marker's summary before it, a repeated tail_start_id): rare, read them all
            session = _core.from_objects(objects, every_body=True)
            out = session.fork(config)
    if out is None:  # not reached: a session whose every body was read is always rendered
        raise AssertionError("ParsedSession.fork found an unread body in a session read whole")
    return len(session), out


__all__ = ["Engine", "ForkContext", "ForkInputError", "build_fork_context"]
