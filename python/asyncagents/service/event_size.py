"""Byte bounds of the event stream: what one task may weigh in an event or a snapshot.

A task's texts have no size limit of their own in the store (a description or a result may hold
a million characters), but every event is sent to every subscriber and kept in the ring, so each
is cut to fit: every text field to at most `EVENT_TEXT_CHARS` code points, then the longest texts
further until the task's JSON fits its byte budget. A cut field is named in the task's
``truncated`` list (a dotted path for a nested field, e.g. ``progress.last_tool``);
``GET /v1/tasks/{id}`` has it whole. Texts are cut on code-point boundaries; the JSON escapes
every non-ASCII character (``ensure_ascii``), so its length in characters is its length in
UTF-8 bytes.
"""

from __future__ import annotations

import json
from typing import Any

#: the longest text (in code points) any field of a task carries in an event
EVENT_TEXT_CHARS = 4000
#: the largest event on the wire: ``id``, ``event`` and ``data`` lines, in UTF-8 bytes
EVENT_MAX_BYTES = 64 * 1024
#: room kept in `EVENT_MAX_BYTES` for the ``id:`` and ``event:`` lines around the data
_EVENT_FRAME_BYTES = 256
#: the largest JSON of one task in an event
EVENT_TASK_BYTES = EVENT_MAX_BYTES - _EVENT_FRAME_BYTES
#: the largest JSON of one task inside a snapshot (a snapshot carries every task)
SNAPSHOT_TASK_BYTES = 16 * 1024
#: the largest snapshot event; the newest tasks go first, the ones past it are only counted
#: (``omitted``: read them with ``GET /v1/tasks``)
SNAPSHOT_MAX_BYTES = 4 * 1024 * 1024
#: the most the ring of recent events holds (for resumes with ``Last-Event-ID``)
RING_MAX_BYTES = 64 * 1024 * 1024
#: the most events queued for one subscriber before it counts as too slow and is dropped
SUBSCRIBER_MAX_BYTES = 4 * 1024 * 1024
#: the largest ``fork_stats`` (free-form) an event carries; a larger one is left out
FORK_STATS_BYTES = 4096
#: the smallest task budget accepted: room for every non-text field of a task
MIN_TASK_BYTES = 2048


def json_text(value: Any) -> str:
    """`value` as compact ASCII JSON (its length is its size in bytes)."""
    return json.dumps(value, separators=(",", ":"))


#: fields never cut: short by construction, and a client needs them whole
_WHOLE = frozenset({"status"})


def _texts(value: Any, path: str, out: list[tuple[Any, Any, str]]) -> None:
    """Every string under `value` (but in ``fork_stats``, and the status) as (container, key,
    dotted path); lists are walked too (a task's queued follow-ups), by index."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        where = f"{path}.{key}" if path else str(key)
        if where in _WHOLE:
            continue
        if isinstance(item, str):
            out.append((value, key, where))
        elif isinstance(item, (dict, list)) and where != "fork_stats":
            _texts(item, where, out)


def fit_task(out: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Cut the texts of a task's JSON object `out` (in place) so that its JSON, ``truncated``
    included, is at most `max_bytes` long; returns `out`.

    Every text is cut to `EVENT_TEXT_CHARS` first, then the longest ones (the id last) until the
    object fits; ``fork_stats`` is left out (null) when over `FORK_STATS_BYTES`.
    """
    if max_bytes < MIN_TASK_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_TASK_BYTES}")
    cut: list[str] = []
    out["truncated"] = cut
    if out.get("fork_stats") is not None and len(json_text(out["fork_stats"])) > FORK_STATS_BYTES:
        out["fork_stats"] = None
        cut.append("fork_stats")
    texts: list[tuple[Any, Any, str]] = []
    _texts(out, "", texts)
    for container, key, path in texts:
        if len(container[key]) > EVENT_TEXT_CHARS:
            container[key] = container[key][:EVENT_TEXT_CHARS]
            cut.append(path)
    # room for the names of every field that may still be cut
    budget = max_bytes - len(json_text([path for _, _, path in texts])) - len(texts) - 1
    size = len(json_text(out))
    if size > budget:
        size = _shrink([t for t in texts if t[2] != "id"], size, budget, cut)
    if size > budget:
        _shrink([t for t in texts if t[2] == "id"], size, budget, cut)
    return out


def _shrink(texts: list[tuple[Any, Any, str]], size: int, budget: int, cut: list[str]) -> int:
    """Cut the longest of `texts` until the JSON's `size` is within `budget`; the new size."""
    weights = {path: len(json_text(container[key])) for container, key, path in texts}
    while size > budget and texts:
        container, key, path = max(texts, key=lambda t: weights[t[2]])
        text: str = container[key]
        weight = weights[path]
        if not text:
            break  # every text is empty already
        excess = size - budget
        keep = min(len(text) - 1, len(text) * max(0, weight - excess) // weight)
        container[key] = text[:keep]
        weights[path] = len(json_text(container[key]))
        size -= weight - weights[path]
        if path not in cut:
            cut.append(path)
    return size
