"""What a caller's Python value holds, read as CPython's own lookups read it (and the Rust
engine with them): a subclass of dict, list or tuple is read through the base type, never
through methods it overrides; and the lone surrogate test of a str."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def plain_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    """`value`, or for a dict subclass a plain dict of the entries it holds."""
    return value if type(value) is dict else dict(dict.items(value))


def plain_seq(value: list[Any] | tuple[Any, ...]) -> Sequence[Any]:
    """`value`, or for a list or tuple subclass a plain list of the items it holds."""
    if type(value) is list or type(value) is tuple:
        return value
    return list(list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value))


def surrogate_free(text: str) -> bool:
    """No lone surrogate in `text`. ASCII is O(1); otherwise the UTF-32 codec, which refuses
    surrogates, is the fastest C-level scan: about 1 ns a character whatever the text (UTF-8
    takes three times that on CJK; a regex character class is slower still)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-32-le")
    except UnicodeEncodeError:
        return False
    return True
