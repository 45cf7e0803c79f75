"""Typed stubs of the Rust extension `asyncagents._core` (the fork pipeline's engine)."""

from typing import Any, TypeVar, final

from pydantic import BaseModel

from .config import ForkConfig

__all__ = [
    "ParsedSession",
    "RenderResult",
    "_construct",
    "_probes_dict_tables",
    "_walks_borrowed",
    "from_objects",
    "parse_json",
]

#: ``(index, id, [tail_start_id, …])`` of a user message with compaction parts
_Marker = tuple[int, str | None, list[str | None]]
#: ``(index, parent_id)`` of an assistant summary message
_Summary = tuple[int, str | None]
#: ``(context, final_count, total_chars, truncated_results, removed_messages, tier1, tier2,
#: tier3, head_tail_applied, compacted_results, hard_capped, compaction_detected,
#: compaction_slice_index, compaction_tail_messages, turn_removed)``
_Model = TypeVar("_Model", bound=BaseModel)

_Forked = tuple[str, int, int, int, int, int, int, int, int, int, bool, bool, int, int, int]

@final
class ParsedSession:
    """A parsed session whose heads are checked; its large strings stay in the input buffer.

    A message's head (what stage 1 reads) is checked when the session is made; a fault in its
    body (the rest) is kept and counts only for a `render` whose `kept` holds the message, which
    raises `ForkInputError` for the first such fault in list order. The lone surrogate check of
    long texts (texts, outputs, errors) of Python objects is left to each `render` too, as far
    as its context writes them (nothing else reaches it): the first one in context order.

    A walk of Python objects reads bodies only from the newest message down to the compaction
    boundary stage 1 slices at and its tail (`bodies_from`); `render` raises `ValueError` for
    a `kept` message before that, which a walk with ``every_body=True`` reads.
    """

    def __len__(self) -> int: ...
    @property
    def bodies_from(self) -> int: ...
    def compaction_view(self) -> tuple[int, list[_Marker], list[_Summary]]: ...
    def index_of(self, id: str) -> int | None: ...
    def render(self, kept: list[int], config: ForkConfig) -> RenderResult: ...
    def fork(self, config: ForkConfig) -> _Forked | None: ...

@final
class RenderResult:
    """The framed context of the kept messages and what fitting it cost."""

    @property
    def context(self) -> str: ...
    @property
    def final_count(self) -> int: ...
    @property
    def total_chars(self) -> int: ...
    @property
    def truncated_results(self) -> int: ...
    @property
    def head_tail_applied(self) -> int: ...
    @property
    def tier1(self) -> int: ...
    @property
    def tier2(self) -> int: ...
    @property
    def tier3(self) -> int: ...
    @property
    def compacted_results(self) -> int: ...
    @property
    def removed_messages(self) -> int: ...
    @property
    def hard_capped(self) -> bool: ...

def parse_json(data: bytes | str) -> ParsedSession: ...
def from_objects(
    messages: list[Any] | tuple[Any, ...] | dict[str, Any], every_body: bool = False
) -> ParsedSession: ...
def _construct(cls: type[_Model], values: dict[str, Any]) -> _Model:
    """An instance of the pydantic model `cls` whose fields are `values`, unvalidated."""

def _probes_dict_tables() -> bool: ...
def _walks_borrowed(messages: list[Any] | tuple[Any, ...] | dict[str, Any]) -> bool: ...
