"""Reference input handling: JSON text or Python objects in, checked records out.

Every check of docs/pipeline-contract.md lives here, in the order the contract fixes, so that
the Rust engine can be held to the same path and detail for every malformed input.
`read_session` reads the messages from the newest: each whole (head and body) down to the
compaction boundary stage 1 slices at and through its verbatim tail, older ones only by their
head (what stage 1 reads); `read_bodies` then reads any body stage 1 keeps that is not read yet.
So a history that compaction drops costs one look at each message, and every other message is
read once. Only what the later stages read is kept; large strings are kept by reference, never
copied, and parameters stay unserialised until a message is rendered.
The one check left for later is the lone surrogate check of long texts (`check_written`): only
what the context writes of them is read for it, once the budget has chosen the messages.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..compaction import CompactionView
from ..errors import ForkInputError
from ..plain import plain_dict, plain_seq, surrogate_free

#: Containers nested deeper than this in a JSON document are rejected.
MAX_DOCUMENT_DEPTH = 128
#: Containers nested deeper than this in one `state.input` are rejected.
MAX_INPUT_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_TOP_LEVEL = 'expected an array of messages or an export object with a "messages" array'


@dataclass(slots=True, eq=False)
class ToolCall:
    """A `tool` part: its display name, its state (for the parameters) and its result."""

    name: str
    #: the part's `state` object; its `input` is serialised only if the message is rendered
    state: dict[str, Any] | None
    #: no `state.status`: an older-shape call, whose parameters take the tier of the next
    #: tool_result of its message
    legacy: bool
    #: the output (completed) or error text (error), None for any other status
    result: str | None
    is_error: bool
    #: `state.time.compacted` is set: the output was cleared by OpenCode's prune
    compacted: bool


@dataclass(slots=True, eq=False)
class ToolResult:
    """A legacy `tool_result` part with non-empty text."""

    name: str
    result: str
    is_error: bool = False
    compacted: bool = False


Part = str | ToolCall | ToolResult


@dataclass(slots=True, eq=False)
class Message:
    """One message reduced to what the pipeline reads."""

    role: str | None
    #: the rendered error line of an assistant message, or None
    error_line: str | None
    #: what the message renders: text strings, ToolCall and ToolResult, in part order
    parts: list[Part]
    #: the parts that carry a tool result, in part order
    results: list[ToolCall | ToolResult]
    #: its long texts from caller objects that are not ASCII and that a block writes, as
    #: (part index, field path, source) in part order, the source being a text part's text or
    #: the result whose cut the block writes: checked for lone surrogates only as far as a
    #: context writes them (`check_written`); None when there are none
    unchecked: list[tuple[int, str, Part]] | None = None


class ParsedMessages(list[Any]):
    """A message list that `load_json` parsed: its strings are known to hold no lone
    surrogate (the document was checked as a whole), so `read_session` does not look again."""


class _Invalid(Exception):
    """A fault inside one message; `where` is the path below the message."""

    def __init__(self, where: str, detail: str) -> None:
        self.where = where
        self.detail = detail


# --- documents ------------------------------------------------------------------------------


def load_json(data: bytes | str) -> Any:
    """Parse a JSON document as the Rust parser does: strict UTF-8, no NaN, bounded nesting."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ForkInputError("json", "invalid UTF-8") from None
    else:
        text = data
        if not text.isascii() and _SURROGATE.search(text):
            raise ForkInputError("json", "contains a lone surrogate")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ForkInputError("json", f"invalid JSON: {exc}") from None
    except RecursionError:  # far deeper than the limit, which json.loads does not know
        raise ForkInputError("json", f"nested deeper than {MAX_DOCUMENT_DEPTH} levels") from None
    if _deeper_than(document, MAX_DOCUMENT_DEPTH):
        raise ForkInputError("json", f"nested deeper than {MAX_DOCUMENT_DEPTH} levels")
    # json.loads joins escaped surrogate pairs; any surrogate left came from a lone escape.
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(document):
        raise ForkInputError("json", "invalid JSON: lone surrogate in a string escape")
    if isinstance(document, list):
        return ParsedMessages(document)
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        document["messages"] = ParsedMessages(document["messages"])
    return document


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _deeper_than(document: Any, limit: int) -> bool:
    """Whether the containers of a `json.loads` result nest deeper than `limit` (scalar: 0).

    Walks one nesting level at a time with C-level calls only (`gc.get_referents` lists the
    values of a whole level at once). CPython does not track a dict whose values are all
    scalars, so `gc.is_tracked` keeps exactly the containers that may hold containers (lists
    are always tracked); the untracked dicts are leaves, and matter only one level below the
    deepest tracked one, which is checked last.
    """
    level = [document] if gc.is_tracked(document) else []
    depth = 1 if isinstance(document, dict) and not level else 0
    while level:
        depth += 1
        if depth > limit:
            return True
        children = gc.get_referents(*level)
        level = list(filter(gc.is_tracked, children))
        if not level and depth == limit:  # leaf dicts one level down
            return any(isinstance(child, dict) for child in children)
    return depth > limit


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def message_list(document: Any) -> Sequence[Any]:
    """The messages of a `GET /session/{id}/message` list or an `opencode export` document."""
    if type(document) is ParsedMessages:  # a plain list: its strings are checked already
        return document
    if isinstance(document, list | tuple):
        return plain_seq(document)
    if isinstance(document, dict):
        messages = dict.get(document, "messages")
        if type(messages) is ParsedMessages:
            return messages
        if isinstance(messages, list | tuple):
            return plain_seq(messages)
    raise ForkInputError("messages", _TOP_LEVEL)


# --- field checks ---------------------------------------------------------------------------
# Each raises _Invalid with the field's path below its message (`where` + key), built only on
# failure: the paths of well-formed input are never formatted.


def _text(obj: dict[str, Any], key: str, where: str) -> str | None:
    """A long text field (a text, an output, an error): a str, whose lone surrogate check
    waits until the context is known to write it (`check_written`)."""
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass: its characters, as an exact str
    raise _Invalid(f"{where}.{key}", "expected a string")


def _string(obj: dict[str, Any], key: str, where: str) -> str | None:
    """A string field of caller-supplied objects: a str without lone surrogates."""
    value = _text(obj, key, where)
    if value is None or surrogate_free(value):
        return value
    raise _Invalid(f"{where}.{key}", "contains a lone surrogate")


def _object(obj: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None or type(value) is dict:
        return value
    if isinstance(value, dict):
        return plain_dict(value)
    raise _Invalid(f"{where}.{key}", "expected an object")


def _number(obj: dict[str, Any], key: str, where: str) -> float | int | None:
    value = obj.get(key)
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        number: float | int | None = value
        return number
    raise _Invalid(f"{where}.{key}", "expected a number")


def check_input(value: Any, where: str) -> Any:
    """`state.input` of caller objects, returned as it is to be dumped. The common case, a
    flat object of str keys and JSON scalars, is checked entry by entry here (an ASCII str
    needs no lone surrogate scan); anything else gets the full walk of `check_json_value`,
    which names the fault, and where it finds a subclass of dict, list, tuple or str, a plain
    copy (`json.dumps` would read those through their own methods)."""
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or surrogate_free(key)):
                break
            kind = type(item)
            if kind is str:
                if not (item.isascii() or surrogate_free(item)):
                    break
            elif kind is not int and kind is not float and kind is not bool and item is not None:
                break
        else:
            return value
    if check_json_value(value, where):
        return _plain_json(value)
    return value


def check_json_value(value: Any, where: str, level: int = 0) -> bool:
    """`state.input` must be plain JSON (str keys) nested at most MAX_INPUT_DEPTH levels.
    Returns whether it holds a subclass of dict, list, tuple or str (read here by contents).

    Depth first, in key order; recursion only into containers.
    """
    if isinstance(value, dict):
        if level >= MAX_INPUT_DEPTH:
            raise _Invalid(where, f"nested deeper than {MAX_INPUT_DEPTH} levels")
        subclassed = type(value) is not dict
        for key, item in dict.items(value):
            if not isinstance(key, str):
                raise _Invalid(where, "keys must be strings")
            subclassed |= _check_scalar_or_descend(key, where, level)
            subclassed |= _check_scalar_or_descend(item, where, level)
        return subclassed
    if isinstance(value, list | tuple):
        if level >= MAX_INPUT_DEPTH:
            raise _Invalid(where, f"nested deeper than {MAX_INPUT_DEPTH} levels")
        subclassed = type(value) is not list and type(value) is not tuple
        for item in plain_seq(value):
            subclassed |= _check_scalar_or_descend(item, where, level)
        return subclassed
    return _check_scalar_or_descend(value, where, level - 1)


def _check_scalar_or_descend(item: Any, where: str, level: int) -> bool:
    """A value inside a container at `level`: scalars are checked here, containers recursed.
    Returns whether it is or holds a subclass of dict, list, tuple or str."""
    kind = type(item)
    if kind is int or kind is float or kind is bool or item is None:
        return False
    if isinstance(item, str):
        if not surrogate_free(str.__str__(item) if kind is not str else item):
            raise _Invalid(where, "contains a lone surrogate")
        return kind is not str
    if isinstance(item, dict | list | tuple):
        return check_json_value(item, where, level + 1)
    if not isinstance(item, int | float):
        raise _Invalid(where, f"not a JSON value ({type(item).__name__})")
    return False


def _plain_json(value: Any) -> Any:
    """A checked `state.input` value with each subclass of dict, list, tuple or str replaced
    by its base type holding the same contents, as the Rust engine reads it."""
    if isinstance(value, dict):
        return {str.__str__(key): _plain_json(item) for key, item in dict.items(value)}
    if isinstance(value, list | tuple):
        items = [_plain_json(item) for item in plain_seq(value)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, str):
        return str.__str__(value)
    return value


#: `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` without building an encoder
#: per call. No circular check: `state.input` is checked to nest at most MAX_INPUT_DEPTH levels
#: before it is dumped, so it holds no cycle.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
#: The C encoder that `_ENCODER.encode` would build on every call (`JSONEncoder.iterencode`),
#: built once, as hypothesis-jsonschema does: on the small parameters of most calls, building
#: it is most of the cost of a dump. None on an interpreter without the C accelerator.
_MAKE_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE = (
    None
    if _MAKE_C_ENCODER is None
    else _MAKE_C_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
)


def dump_input(value: Any) -> str:
    """Parameters JSON exactly as DECISIONS.md fixes it (Python's compact json.dumps)."""
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(value, 0))
    return _ENCODER.encode(value)


# --- messages -------------------------------------------------------------------------------


@dataclass(slots=True)
class Session:
    """The checked heads of the messages, the bodies read so far, and the sparse view stage 1
    reads; `read_bodies` reads the rest of the bodies stage 1 keeps."""

    messages: Sequence[Any]
    #: the records of the bodies read, and the fault of each body that has one, by index
    records: dict[int, Message]
    faults: dict[int, ForkInputError]
    #: the messages came from `load_json` (no lone surrogate in them)
    parsed: bool
    view: CompactionView


def read_session(messages: Sequence[Any]) -> Session:
    """Check every message's head (what stage 1 reads: see `_read_message`) and collect the
    compaction view (from checked values only).

    The messages are read from the newest, each whole down to the compaction boundary stage 1
    slices at (the newest marker with a summary after it) and its verbatim tail, so a session
    without compaction is read in one pass (a body's fault is kept for `read_bodies`); older
    messages only by their head (`_read_heads`): a history that compaction drops costs one
    look at each message. A head's fault stops the reading; the first one in list order is
    raised.
    """
    parsed = isinstance(messages, ParsedMessages)
    count = len(messages)
    ids: list[str | None] = [None] * count
    markers: list[tuple[int, str | None, list[str | None]]] = []
    summaries: list[tuple[int, str | None]] = []
    records: dict[int, Message] = {}
    faults: dict[int, ForkInputError] = {}
    boundary = False  # met: read whole until the message with `tail_start`
    tail_start: str | None = None
    i = count - 1
    while i >= 0:  # newer than the boundary, or in its tail: read whole
        try:
            msg_id, parent_id, summary, tail_ids, body = _read_message(messages[i], parsed, True)
        except _Invalid as bad:
            _read_heads(messages, i, parsed, ids, [], [])  # raises the first fault before i
            raise ForkInputError(f"messages[{i}]{bad.where}", bad.detail) from None
        ids[i] = msg_id
        if isinstance(body, _Invalid):
            faults[i] = ForkInputError(f"messages[{i}]{body.where}", body.detail)
        elif body is not None:
            records[i] = body
        last_whole = boundary and msg_id == tail_start  # the tail's first message
        if tail_ids:
            markers.append((i, msg_id, tail_ids))
            if summaries and not boundary:
                # Stage 1's boundary, but for a marker whose summary comes before it (rare:
                # what it keeps then, `read_bodies` reads). Its tail starts at the first
                # message with its tail_start_id, if that lies before the marker.
                boundary = True
                tail_start = tail_ids[0]
                last_whole = tail_start is None or tail_start in ids
        if summary:
            summaries.append((i, parent_id))
        if last_whole:
            break  # older messages only by their head
        i -= 1
    older_markers: list[tuple[int, str | None, list[str | None]]] = []
    older_summaries: list[tuple[int, str | None]] = []
    _read_heads(messages, i, parsed, ids, older_markers, older_summaries)
    markers.reverse()
    summaries.reverse()
    view = CompactionView(
        count, older_markers + markers, older_summaries + summaries, _index_in(ids)
    )
    return Session(messages, records, faults, parsed, view)


def _read_heads(
    messages: Sequence[Any],
    stop: int,
    parsed: bool,
    ids: list[str | None],
    markers: list[tuple[int, str | None, list[str | None]]],
    summaries: list[tuple[int, str | None]],
) -> None:
    """Read the heads of `messages[:stop]` in list order into `ids`, `markers` and
    `summaries`, raising the first fault.

    The common head (a plain dict whose `info` is a plain dict with a str role, id and
    parentID that need no lone surrogate check, and a plain `parts` list) is read inline,
    without a call per message (which made the 1,668 heads of `deep_compaction` at 2,000
    messages cost 1.27x as long). Any other goes to `_read_message`, which checks every
    field and names the fault.
    """
    for i in range(stop):
        raw = messages[i]
        try:
            if type(raw) is dict:
                info = raw.get("info")
                parts = raw.get("parts")
                if type(info) is dict and type(parts) is list:
                    role = info.get("role")
                    msg_id = info.get("id")
                    parent_id = info.get("parentID")
                    if (
                        type(role) is str
                        and (msg_id is None or type(msg_id) is str)
                        and (parent_id is None or type(parent_id) is str)
                        and (
                            parsed
                            or (
                                role.isascii()
                                and (msg_id or "").isascii()
                                and (parent_id or "").isascii()
                            )
                        )
                    ):
                        ids[i] = msg_id
                        if role == "user":
                            tail_ids = _tail_ids(parts, parsed)
                            if tail_ids:
                                markers.append((i, msg_id, tail_ids))
                        elif role == "assistant" and info.get("summary") is True:
                            summaries.append((i, parent_id))
                        continue
            msg_id, parent_id, summary, tail_ids, _ = _read_message(raw, parsed, False)
        except _Invalid as bad:
            raise ForkInputError(f"messages[{i}]{bad.where}", bad.detail) from None
        ids[i] = msg_id
        if tail_ids:
            markers.append((i, msg_id, tail_ids))
        if summary:
            summaries.append((i, parent_id))


def read_bodies(session: Session, kept: Sequence[int]) -> dict[int, Message]:
    """The records of the `kept` messages, their bodies checked in list order (so the first
    fault is the first in the list): read by `read_session` already, or now."""
    records, faults = session.records, session.faults
    missing = [i for i in kept if i not in records]
    if not missing:
        return records
    for i in sorted(set(missing)):
        if i in faults:
            raise faults[i]
        *_, body = _read_message(session.messages[i], session.parsed, True)
        if isinstance(body, _Invalid):
            raise ForkInputError(f"messages[{i}]{body.where}", body.detail)
        if body is not None:
            records[i] = body
    return records


def _index_in(ids: list[str | None]) -> Callable[[str], int | None]:
    """`index_of` of the compaction view: first message with this id (C-level `list.index`)."""

    def index_of(msg_id: str) -> int | None:
        try:
            return ids.index(msg_id)
        except ValueError:
            return None

    return index_of


_NO_RESULTS: list[ToolCall | ToolResult] = []

# The readers below test the common cases inline, None or `type(v) is str and (parsed or
# v.isascii())` (a str that needs no lone surrogate check), and call `_string` for anything
# else: a non-str raises, a non-ASCII str from caller objects gets the surrogate check. The
# long texts (a text, a result, an error) go to `_text` instead: their check waits for
# `check_written`, which reads only what the context writes of them.

#: id, parentID, summary, compaction tail ids, and the record or fault of the body
_Read = tuple[str | None, str | None, bool, list[str | None], Message | _Invalid | None]


def _read_message(raw: Any, parsed: bool, body: bool) -> _Read:
    """A message's head, once every field of it is checked (raises `_Invalid`): its id,
    parentID, whether it is a compaction summary, and its compaction tail ids. With `body`,
    also its record, or the first fault of its body (an assistant's `info.error`, every
    part's fields), which a head's fault anywhere in the message beats.

    The head is the message, `info` with `role`, `id`, `parentID` (and `summary`), `parts`,
    and in a user message each part's `type` and a compaction part's `tail_start_id`.
    """
    if type(raw) is not dict:
        if not isinstance(raw, dict):
            raise _Invalid("", "expected an object")
        raw = plain_dict(raw)
    info = raw.get("info")
    if type(info) is not dict:
        if info is None:
            raise _Invalid(".info", "missing")
        if not isinstance(info, dict):
            raise _Invalid(".info", "expected an object")
        info = plain_dict(info)
    role = info.get("role")
    if role is not None and not (type(role) is str and (parsed or role.isascii())):
        role = _string(info, "role", ".info")
    msg_id = info.get("id")
    if msg_id is not None and not (type(msg_id) is str and (parsed or msg_id.isascii())):
        msg_id = _string(info, "id", ".info")
    parent_id = info.get("parentID")
    if parent_id is not None and not (type(parent_id) is str and (parsed or parent_id.isascii())):
        parent_id = _string(info, "parentID", ".info")
    parts = raw.get("parts")
    if type(parts) is not list:
        if not isinstance(parts, list | tuple):
            raise _Invalid(".parts", "missing" if parts is None else "expected an array")
        parts = plain_seq(parts)
    summary = role == "assistant" and info.get("summary") is True
    user = role == "user"
    if not body:
        return msg_id, parent_id, summary, _tail_ids(parts, parsed) if user else [], None
    # the body: an assistant's `info.error`, then every part (a user message's compaction
    # tail ids come with it)
    items: list[Part] = []
    results = _NO_RESULTS
    tail_ids: list[str | None] = []
    last_tool_name: str | None = None
    unchecked: list[tuple[int, str, Part]] | None = None
    try:
        error_line = _error_line(info) if role == "assistant" and "error" in info else None
        try:
            for j, part in enumerate(parts):
                if type(part) is dict:
                    kind = part.get("type")
                else:
                    part = plain_dict(part) if isinstance(part, dict) else part
                    kind = None
                if not (type(kind) is str and (parsed or kind.isascii())):
                    kind = _part_type(part, parsed)
                if kind == "text":
                    text = part.get("text")
                    unsure = text is not None and not (
                        type(text) is str and (parsed or text.isascii())
                    )
                    if unsure:
                        text = _text(part, "text", "")
                    ignored = part.get("ignored")
                    if ignored is not None and type(ignored) is not bool:
                        raise _Invalid(".ignored", "expected a boolean")
                    if text and not ignored:
                        items.append(text)
                        if unsure and not parsed:
                            unchecked = _defer(unchecked, j, ".text", text)
                elif kind == "tool":
                    call = _read_tool(part, parsed)
                    if (
                        not parsed
                        and call.result
                        and not call.compacted
                        and not call.result.isascii()
                    ):
                        key = ".state.error" if call.is_error else ".state.output"
                        unchecked = _defer(unchecked, j, key, call)
                    last_tool_name = call.name
                    items.append(call)
                    if call.result is not None:
                        if results is _NO_RESULTS:
                            results = []
                        results.append(call)
                elif kind == "tool_result":
                    text = _text(part, "text", "")
                    tool = _string(part, "tool", "")
                    alt_name = _string(part, "name", "")
                    if text:
                        found = ToolResult(tool or alt_name or last_tool_name or "", text)
                        if not parsed and not text.isascii():
                            unchecked = _defer(unchecked, j, ".text", found)
                        items.append(found)
                        if results is _NO_RESULTS:
                            results = []
                        results.append(found)
                elif kind == "compaction":
                    tail_start_id = _string(part, "tail_start_id", "")
                    if user:
                        tail_ids.append(tail_start_id)
        except _Invalid as bad:
            raise _Invalid(f".parts[{j}]{bad.where}", bad.detail) from None
    except _Invalid as fault:  # a body's: the rest of a user message's head still counts
        return msg_id, parent_id, summary, _tail_ids(parts, parsed) if user else [], fault
    record = Message(role, error_line, items, results, unchecked)
    return msg_id, parent_id, summary, tail_ids, record


def _tail_ids(parts: Sequence[Any], parsed: bool) -> list[str | None]:
    """The `tail_start_id` of each compaction part of a user message, once each part is
    checked to be an object with a string `type` (the rest of a user message's head)."""
    tail_ids: list[str | None] = []
    for j, part in enumerate(parts):
        if type(part) is dict:  # the common part, read inline
            kind = part.get("type")
            if type(kind) is str and (parsed or kind.isascii()) and kind != "compaction":
                continue
        part = plain_dict(part) if isinstance(part, dict) else part
        try:
            if _part_type(part, parsed) == "compaction":
                tail_ids.append(_string(part, "tail_start_id", ""))
        except _Invalid as bad:
            raise _Invalid(f".parts[{j}]{bad.where}", bad.detail) from None
    return tail_ids


def _part_type(part: Any, parsed: bool) -> str:
    """A part's `type`, once the part (a plain dict, see `plain_dict`, or anything else) is
    checked to be an object and its type a string."""
    if type(part) is not dict:
        raise _Invalid("", "expected an object")
    kind = part.get("type")
    if type(kind) is str and (parsed or kind.isascii()):
        return kind
    if kind is None:
        raise _Invalid(".type", "missing")
    return _string(part, "type", "") or ""  # a str: it is not None


#: the cut text and tier of each result a block writes (`ResultTiers.take`)
Rendered = dict[ToolCall | ToolResult, tuple[str, int]]


def _defer(
    unchecked: list[tuple[int, str, Part]] | None, j: int, key: str, source: Part
) -> list[tuple[int, str, Part]]:
    """`unchecked` with (part `j`, `key`, `source`) appended: made on first use."""
    if unchecked is None:
        return [(j, key, source)]
    unchecked.append((j, key, source))
    return unchecked


def check_written(shown: Iterable[tuple[int, Message, Rendered | None]]) -> None:
    """The lone surrogate check of the long texts a context writes: `shown` holds each shown
    block in context order, as (message index, record, the results it rendered). The first
    fault in that order is raised, each message's texts in part order.

    Only what is written is read: a text part whole, a result as its tier cut it (a message
    the hard cap cuts counts whole, as its block was before the cut). A message the fork
    does not show (compaction or the budget dropped it) and the part of an output a cut drops
    are never written, so they are not read for this: that work would cost as much as the
    rest of the reference together on sessions with long non-ASCII histories.
    """
    for i, message, rendered in shown:
        if not message.unchecked or rendered is None:
            continue
        for j, key, source in message.unchecked:
            text = source if isinstance(source, str) else rendered[source][0]
            if not surrogate_free(text):
                raise ForkInputError(f"messages[{i}].parts[{j}]{key}", "contains a lone surrogate")


def _error_line(info: dict[str, Any]) -> str | None:
    error = _object(info, "error", ".info")
    if error is None:
        return None
    name = _string(error, "name", ".info.error") or "Error"
    data = _object(error, "data", ".info.error")
    detail = _string(data, "message", ".info.error.data") if data is not None else None
    return f"[Error: {name}] {detail}" if detail else f"[Error: {name}]"


def _read_tool(part: dict[str, Any], parsed: bool) -> ToolCall:
    tool = part.get("tool")
    if tool is not None and not (type(tool) is str and (parsed or tool.isascii())):
        tool = _string(part, "tool", "")
    alt_name = part.get("name")
    if alt_name is not None and not (type(alt_name) is str and (parsed or alt_name.isascii())):
        alt_name = _string(part, "name", "")
    name = tool or alt_name or "unknown"
    state = part.get("state")
    if type(state) is not dict:
        state = _object(part, "state", "")
        if state is None:
            return ToolCall(name, None, True, None, False, False)
    status = state.get("status")
    if status is not None and not (type(status) is str and (parsed or status.isascii())):
        status = _string(state, "status", ".state")
    if "input" in state:
        if not parsed:
            plain = check_input(state["input"], ".state.input")
            if plain is not state["input"]:
                state = {**state, "input": plain}
        elif gc.is_tracked(state["input"]):
            # parsed JSON needs only the depth check; a flat object (all values scalars, which
            # CPython does not track) is at depth 1
            check_json_value(state["input"], ".state.input")
    if status == "completed":
        output = state.get("output")
        if output is not None and type(output) is not str:
            output = _text(state, "output", ".state")
        time = state.get("time")
        compacted = False
        if time is not None:
            if type(time) is not dict:
                time = _object(state, "time", ".state")
            stamp = time.get("compacted")  # type: ignore[union-attr]
            if stamp is not None and type(stamp) is not int and type(stamp) is not float:
                stamp = _number(time, "compacted", ".state.time")  # type: ignore[arg-type]
            compacted = stamp is not None
        return ToolCall(name, state, False, output or "", False, compacted)
    if status == "error":
        error = _text(state, "error", ".state") or ""
        return ToolCall(name, state, False, error, True, False)
    return ToolCall(name, state, status is None, None, False, False)
