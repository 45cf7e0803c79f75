"""Bad input: `ForkInputError(path, detail)` exactly as docs/pipeline-contract.md says, the same
from both engines; and the extension never crashes on garbage."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from asyncagents import ForkConfig, ForkInputError, _core, build_fork_context
from fork_builders import T0, assistant, block, compaction, framed, tool, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TOP = 'expected an array of messages or an export object with a "messages" array'
OK_MSG = {"info": {"id": "msg_0", "role": "user"}, "parts": [{"type": "text", "text": "ok"}]}
OK_PART = {"type": "text", "text": "fine"}


def error_of(data: Any, engine: str) -> ForkInputError:
    with pytest.raises(ForkInputError) as info:
        build_fork_context(data, engine=engine)
    err = info.value
    assert isinstance(err, ValueError)
    assert str(err) == f"{err.path}: {err.detail}"
    return err


LONE = "contains a lone surrogate"


def check(data: Any, engine: str, path: str, detail: str) -> None:
    err = error_of(data, engine)
    assert (err.path, err.detail) == (path, detail)


def as_forms(doc: Any) -> list[Any]:
    """The document as Python objects, as JSON bytes and as a JSON str."""
    return [doc, json.dumps(doc).encode(), json.dumps(doc, ensure_ascii=False)]


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# --- top level -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        {"foo": 1},
        {"messages": {}},
        {"info": {}, "messages": None},
        {"messages": "x"},
        42,
        None,
        True,
    ],
    ids=["object", "messages-object", "messages-null", "messages-str", "number", "null", "bool"],
)
def test_top_level_shape(engine, doc):
    for data in as_forms(doc):
        check(data, engine, "messages", TOP)


@pytest.mark.parametrize("data", [b'"text"', b"3.5", "null", b"  {}  "])
def test_top_level_shape_from_json(engine, data):
    check(data, engine, "messages", TOP)


# --- messages and info ---------------------------------------------------------------------------

MESSAGE_CASES = [
    ("not-object-int", 1, "", "expected an object"),
    ("not-object-list", [], "", "expected an object"),
    ("not-object-str", "msg", "", "expected an object"),
    ("not-object-null", None, "", "expected an object"),
    ("info-missing", {"parts": []}, ".info", "missing"),
    ("info-array", {"info": [], "parts": []}, ".info", "expected an object"),
    ("info-str", {"info": "x", "parts": []}, ".info", "expected an object"),
    ("parts-missing", {"info": {"role": "user"}}, ".parts", "missing"),
    ("parts-null", {"info": {"role": "user"}, "parts": None}, ".parts", "missing"),
    ("parts-object", {"info": {}, "parts": {}}, ".parts", "expected an array"),
    ("parts-str", {"info": {}, "parts": "abc"}, ".parts", "expected an array"),
    ("role", {"info": {"role": 5}, "parts": []}, ".info.role", "expected a string"),
    ("role-bool", {"info": {"role": True}, "parts": []}, ".info.role", "expected a string"),
    ("id", {"info": {"id": 5}, "parts": []}, ".info.id", "expected a string"),
    ("parentID", {"info": {"parentID": []}, "parts": []}, ".info.parentID", "expected a string"),
    (
        "error",
        {"info": {"role": "assistant", "error": "boom"}, "parts": []},
        ".info.error",
        "expected an object",
    ),
    (
        "error-name",
        {"info": {"role": "assistant", "error": {"name": 1}}, "parts": []},
        ".info.error.name",
        "expected a string",
    ),
    (
        "error-data",
        {"info": {"role": "assistant", "error": {"name": "E", "data": "x"}}, "parts": []},
        ".info.error.data",
        "expected an object",
    ),
    (
        "error-data-message",
        {"info": {"role": "assistant", "error": {"data": {"message": 5}}}, "parts": []},
        ".info.error.data.message",
        "expected a string",
    ),
]


@pytest.mark.parametrize(
    ("bad", "subpath", "detail"),
    [case[1:] for case in MESSAGE_CASES],
    ids=[case[0] for case in MESSAGE_CASES],
)
def test_message_and_info_fields(engine, bad, subpath, detail):
    doc = [OK_MSG, OK_MSG, bad]
    for data in as_forms(doc):
        check(data, engine, "messages[2]" + subpath, detail)
    export = {"info": {"id": "ses_x"}, "messages": doc}
    for data in as_forms(export):
        check(data, engine, "messages[2]" + subpath, detail)


# --- parts ---------------------------------------------------------------------------------------


def completed(**state: Any) -> dict:
    return {"type": "tool", "tool": "bash", "state": {"status": "completed", "input": {}, **state}}


PART_CASES = [
    ("not-object", 5, "", "expected an object"),
    ("not-object-list", ["text"], "", "expected an object"),
    ("type-missing", {"text": "a"}, ".type", "missing"),
    ("type-number", {"type": 5}, ".type", "expected a string"),
    ("text", {"type": "text", "text": 5}, ".text", "expected a string"),
    ("text-list", {"type": "text", "text": ["a"]}, ".text", "expected a string"),
    ("ignored", {"type": "text", "text": "a", "ignored": "yes"}, ".ignored", "expected a boolean"),
    ("ignored-int", {"type": "text", "text": "a", "ignored": 1}, ".ignored", "expected a boolean"),
    ("tool-tool", {"type": "tool", "tool": 5}, ".tool", "expected a string"),
    ("tool-name", {"type": "tool", "name": {}}, ".name", "expected a string"),
    ("tool-state", {"type": "tool", "tool": "x", "state": "s"}, ".state", "expected an object"),
    ("tool-state-list", {"type": "tool", "state": []}, ".state", "expected an object"),
    ("status", {"type": "tool", "state": {"status": 5}}, ".state.status", "expected a string"),
    ("output", completed(output=5), ".state.output", "expected a string"),
    ("time", completed(output="o", time="t"), ".state.time", "expected an object"),
    (
        "compacted-bool",
        completed(output="o", time={"compacted": True}),
        ".state.time.compacted",
        "expected a number",
    ),
    (
        "compacted-str",
        completed(output="o", time={"compacted": "1767000000000"}),
        ".state.time.compacted",
        "expected a number",
    ),
    (
        "error",
        {"type": "tool", "state": {"status": "error", "error": 5}},
        ".state.error",
        "expected a string",
    ),
    ("tool_result-text", {"type": "tool_result", "text": 5}, ".text", "expected a string"),
    (
        "tool_result-tool",
        {"type": "tool_result", "text": "a", "tool": 5},
        ".tool",
        "expected a string",
    ),
    (
        "tool_result-name",
        {"type": "tool_result", "text": "a", "name": 5},
        ".name",
        "expected a string",
    ),
    (
        "input-65",
        {"type": "tool", "tool": "x", "state": {"status": "running", "input": nested(65)}},
        ".state.input",
        "nested deeper than 64 levels",
    ),
    (
        "input-65-objects",
        {"type": "tool", "state": {"status": "pending", "input": {"a": nested(64, {})}}},
        ".state.input",
        "nested deeper than 64 levels",
    ),
]


@pytest.mark.parametrize(
    ("bad", "subpath", "detail"),
    [case[1:] for case in PART_CASES],
    ids=[case[0] for case in PART_CASES],
)
@pytest.mark.parametrize("role", ["user", "assistant", "other"])
def test_part_fields(engine, bad, subpath, detail, role):
    doc = [OK_MSG, {"info": {"id": "msg_1", "role": role}, "parts": [OK_PART, OK_PART, bad]}]
    for data in as_forms(doc):
        check(data, engine, "messages[1].parts[2]" + subpath, detail)


def test_compaction_tail_start_id(engine):
    bad = {"type": "compaction", "auto": False, "tail_start_id": 5}
    doc = [OK_MSG, {"info": {"id": "msg_1", "role": "user"}, "parts": [bad]}]
    for data in as_forms(doc):
        check(data, engine, "messages[1].parts[0].tail_start_id", "expected a string")


def test_input_at_64_levels_is_fine(engine):
    for value in (nested(64), nested(63, {}), {"a": nested(63)}):
        doc = [
            {
                "info": {"role": "assistant"},
                "parts": [
                    {"type": "tool", "tool": "t", "state": {"status": "running", "input": value}}
                ],
            }
        ]
        for data in as_forms(doc):
            ctx = build_fork_context(data, engine=engine)
            dumped = json.dumps(value, separators=(",", ":"))
            assert ctx.context == framed(
                block("Agent", "[Tool: t] " + dumped[:500] + ("..." if len(dumped) > 500 else ""))
            )


def test_very_deep_input_from_objects_does_not_crash(engine):
    doc = [
        {
            "info": {},
            "parts": [{"type": "tool", "state": {"status": "running", "input": nested(50_000)}}],
        }
    ]
    check(doc, engine, "messages[0].parts[0].state.input", "nested deeper than 64 levels")


# --- fields that are not read are not checked; null is absent ------------------------------------


def test_fields_that_are_not_read_are_not_checked(fork):
    msgs = [
        {"info": {"role": "user", "error": "not read on users", "summary": "x"}, "parts": []},
        {
            "info": {"role": "assistant", "summary": 7, "time": "x", "tokens": None},
            "parts": [
                {
                    "type": "tool",
                    "tool": "a",
                    "state": {"status": "running", "output": 5, "error": 6},
                },
                {
                    "type": "tool",
                    "tool": "b",
                    "state": {"status": "completed", "output": "o", "error": 5},
                },
                {
                    "type": "tool",
                    "tool": "c",
                    "state": {
                        "status": "error",
                        "error": "e",
                        "output": 5,
                        "time": {"compacted": True},
                    },
                },
                {"type": "tool", "tool": "d", "state": {"status": "pending", "time": "x"}},
                {"type": "text", "text": "t", "synthetic": "yes", "time": 5},
                {"type": "reasoning", "text": 5},
                {"type": "file", "url": 5, "mime": []},
                {"type": "step-finish", "tokens": "x"},
                {"type": "compaction", "auto": "maybe"},
            ],
        },
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("User"),
        block(
            "Agent",
            "[Tool: a]",
            "[Tool: b]",
            "[Tool result]\no",
            "[Tool: c]",
            "[Tool result]\ne",
            "[Tool: d]",
            "t",
        ),
    )


def test_null_counts_as_absent(fork):
    msgs = [
        {"info": {"role": None, "id": None, "parentID": None, "error": None}, "parts": []},
        {
            "info": {"role": "assistant", "error": {"name": None, "data": None}},
            "parts": [
                {"type": "text", "text": None, "ignored": None},
                {"type": "tool", "tool": None, "name": None, "state": None},
                {"type": "tool", "tool": "x", "state": {"status": None, "input": None}},
                {
                    "type": "tool",
                    "tool": "y",
                    "state": {"status": "completed", "output": None, "time": None},
                },
                {
                    "type": "tool",
                    "tool": "z",
                    "state": {"status": "completed", "output": "kept", "time": {"compacted": None}},
                },
                {"type": "tool_result", "text": None, "tool": None, "name": None},
                {"type": "compaction", "tail_start_id": None},
            ],
        },
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(
        block("Unknown"),
        block(
            "Agent",
            "[Tool: unknown]",
            "[Tool: x] null",
            "[Tool: y]",
            "[Tool result]\n",
            "[Tool: z]",
            "[Tool result]\nkept",
            "[Error: Error]",
        ),
    )


# --- Python objects only -------------------------------------------------------------------------

PATH_INPUT = "messages[0].parts[0].state.input"


def with_input(value: Any) -> list[dict]:
    return [
        {"info": {}, "parts": [{"type": "tool", "state": {"status": "running", "input": value}}]}
    ]


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ({1: "a"}, "keys must be strings"),
        ({"a": {(1, 2): "b"}}, "keys must be strings"),
        ({"a": {1, 2}}, "not a JSON value (set)"),
        ([object()], "not a JSON value (object)"),
        ({"a": b"x"}, "not a JSON value (bytes)"),
        (Decimal("1.5"), "not a JSON value (Decimal)"),
        ({"k": "\ud800"}, "contains a lone surrogate"),
        ({"\udfff": 1}, "contains a lone surrogate"),
        (["ok", ["\udc00x"]], "contains a lone surrogate"),
    ],
)
def test_input_values_from_objects(engine, value, detail):
    check(with_input(value), engine, PATH_INPUT, detail)


class _Attrs:
    pass


def _input_dicts(leaf: Any) -> dict[str, dict[str, Any]]:
    """`{"k": leaf, "n": 1}` as dicts of every table CPython makes: plain, with deleted entries,
    with a table of general keys (a non-str key came and went), an instance's split table, a
    subclass, and nested in lists and tuples."""
    deleted = {"gone": 1, "k": leaf, "also": 2, "n": 1}
    del deleted["gone"], deleted["also"]
    general: dict[Any, Any] = {1: 0, "k": leaf, "n": 1}
    del general[1]
    attrs = _Attrs()
    attrs.k = leaf  # type: ignore[attr-defined]
    attrs.n = 1  # type: ignore[attr-defined]

    class Sub(dict):  # type: ignore[type-arg]
        pass

    return {
        "plain": {"k": leaf, "n": 1},
        "deleted": deleted,
        "general": general,
        "split": vars(attrs),
        "subclass": Sub(k=leaf, n=1),
        "nested": {"x": [({"k": leaf, "n": 1},)]},
    }


@pytest.mark.parametrize("table", list(_input_dicts(0)))
def test_input_dicts_of_every_table_kind(engine, table):
    value = _input_dicts("v\u00e9\U0001f600")[table]
    call = {"type": "tool", "tool": "t", "state": {"status": "running", "input": value}}
    doc = [{"info": {"role": "assistant"}, "parts": [call]}]
    ctx = build_fork_context(doc, engine=engine)
    dumped = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert ctx.context == framed(block("Agent", "[Tool: t] " + dumped))


@pytest.mark.parametrize("table", list(_input_dicts(0)))
@pytest.mark.parametrize("leaf", ["\ud800", "a\U0001f600\udfff", {"\udc00": 1}, 1j], ids=repr)
def test_input_faults_in_dicts_of_every_table_kind(engine, table, leaf):
    detail = "not a JSON value (complex)" if leaf == 1j else LONE
    check(with_input(_input_dicts(leaf)[table]), engine, PATH_INPUT, detail)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ([{"info": {"role": "us\ud800er"}, "parts": []}], "messages[0].info.role"),
        ([{"info": {"id": "\udc00"}, "parts": []}], "messages[0].info.id"),
        ([{"info": {"parentID": "\udc00"}, "parts": []}], "messages[0].info.parentID"),
        (
            [{"info": {"role": "assistant", "error": {"name": "\ud800"}}, "parts": []}],
            "messages[0].info.error.name",
        ),
        (
            [
                {
                    "info": {"role": "assistant", "error": {"data": {"message": "\ud800"}}},
                    "parts": [],
                }
            ],
            "messages[0].info.error.data.message",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": "a\ud800b"}]}],
            "messages[0].parts[0].text",
        ),
        # in strings of every width, anywhere (the check reads each string in its own layout)
        (
            [{"info": {}, "parts": [{"type": "text", "text": "é" * 300 + "\udc00"}]}],
            "messages[0].parts[0].text",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": "漢" * 300 + "\ud800" + "漢"}]}],
            "messages[0].parts[0].text",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": "\udbff" + "😀" * 300}]}],
            "messages[0].parts[0].text",
        ),
        ([{"info": {}, "parts": [{"type": "\ud800"}]}], "messages[0].parts[0].type"),
        (
            [{"info": {}, "parts": [{"type": "tool", "tool": "\ud800"}]}],
            "messages[0].parts[0].tool",
        ),
        (
            [
                {
                    "info": {},
                    "parts": [
                        {"type": "tool", "state": {"status": "completed", "output": "\udfff"}}
                    ],
                }
            ],
            "messages[0].parts[0].state.output",
        ),
        (
            [
                {
                    "info": {},
                    "parts": [{"type": "tool", "state": {"status": "error", "error": "\udfff"}}],
                }
            ],
            "messages[0].parts[0].state.error",
        ),
        (
            [{"info": {}, "parts": [{"type": "tool_result", "text": "\ud800"}]}],
            "messages[0].parts[0].text",
        ),
        (
            [{"info": {}, "parts": [{"type": "compaction", "tail_start_id": "\ud800"}]}],
            "messages[0].parts[0].tail_start_id",
        ),
    ],
)
def test_lone_surrogates_in_read_strings_from_objects(engine, doc, path):
    check(doc, engine, path, "contains a lone surrogate")


@pytest.mark.parametrize("wide", ["é", "漢", "😀"])
def test_a_wrong_type_anywhere_beats_a_lone_surrogate_in_a_long_text(engine, wide):
    # a long text's lone surrogate is looked for only once the context is known to show its
    # message, after every message was read; a short string's is found where it is read
    bad_text = {"info": {}, "parts": [{"type": "text", "text": wide * 50 + "\ud800"}]}
    wrong_type = {"info": {"role": 7}, "parts": []}
    fine = {"info": {}, "parts": [{"type": "text", "text": wide * 50}]}
    check([fine, bad_text, wrong_type], engine, "messages[2].info.role", "expected a string")
    check([fine, wrong_type, bad_text], engine, "messages[1].info.role", "expected a string")
    check([fine, bad_text, fine], engine, "messages[1].parts[0].text", LONE)
    bad_id = {"info": {"id": wide + "\udfff"}, "parts": []}
    check([fine, bad_id, wrong_type], engine, "messages[1].info.id", LONE)
    # within one tool part: the time is checked, the output's lone surrogate waits
    part = {
        "type": "tool",
        "state": {"status": "completed", "output": wide + "\udfff", "time": {"compacted": "x"}},
    }
    check(
        [{"info": {}, "parts": [part]}],
        engine,
        "messages[0].parts[0].state.time.compacted",
        "expected a number",
    )
    del part["state"]["time"]
    check([{"info": {}, "parts": [part]}], engine, "messages[0].parts[0].state.output", LONE)


# Long texts (texts, outputs, errors) of walked objects are checked for lone surrogates only as far
# as the context writes them: the messages it shows, in context order, a text whole and a result
# as its tier cut it (docs/pipeline-contract.md). The searches for the marker and the error words
# do not decide it: a fault is reported wherever a search stopped.

CLEARED = "[Old tool result content cleared]"
#: characters the render narrows at a time (`NARROW_BLOCK` in rust/src/tiers.rs)
NARROW_BLOCK = 32 * 1024


def _output(value: str, name: str = "read") -> dict[str, Any]:
    return {"info": {"role": "assistant"}, "parts": [tool(name, {}, output=value)]}


def _text(value: str) -> dict[str, Any]:
    return {"info": {"role": "user"}, "parts": [{"type": "text", "text": value}]}


OUTPUT = "messages[{}].parts[0].state.output"
TEXT = "messages[{}].parts[0].text"


@pytest.mark.parametrize("wide", ["\u0100", "漢", "😀"])
@pytest.mark.parametrize(
    "at",
    [0, 1, NARROW_BLOCK - 40, NARROW_BLOCK - 1, NARROW_BLOCK, NARROW_BLOCK + 17, 3 * NARROW_BLOCK],
)
def test_lone_surrogate_anywhere_in_a_searched_output(engine, wide, at):
    value = wide * at + "\udc00" + wide * 50
    check([_output(value)], engine, OUTPUT.format(0), LONE)
    # with the cleared marker or an error word first, the searches stop early: the check does not
    check([_output(CLEARED + value)], engine, OUTPUT.format(0), LONE)
    check([_output("error: " + value)], engine, OUTPUT.format(0), LONE)
    # a bash output is cut head+tail without searching for error words
    check([_output(value, name="bash")], engine, OUTPUT.format(0), LONE)


@pytest.mark.parametrize("wide", ["\u0100", "😀"])
def test_first_lone_surrogate_in_walk_order_between_searched_and_unsearched_strings(engine, wide):
    searched = _output(wide * 5000 + "\ud800")  # a tier-1 output: searched for the marker
    unsearched = _text(wide * 10 + "\udfff")  # a text is never searched
    fine = _output(wide * 5000)
    check([fine, unsearched, searched], engine, TEXT.format(1), LONE)
    check([fine, searched, unsearched], engine, OUTPUT.format(1), LONE)
    # an output too short to hold the marker, within its limit: not searched either
    short = _output(wide * 3 + "\ud800")
    check([fine, short, searched], engine, OUTPUT.format(1), LONE)
    check([searched, short], engine, OUTPUT.format(0), LONE)


def test_lone_surrogate_in_a_message_compaction_drops_is_never_read(engine):
    dropped = _output("😀" * 3000 + "\ud800")
    dropped_text = _text("漢" * 10 + "\udfff")
    marker = user("msg_c", compaction())
    summary = assistant("msg_s", {"type": "text", "text": "summary"}, parent="msg_c", summary=True)
    after = _output("😀" * 3000)
    forked = build_fork_context([dropped, dropped_text, marker, summary, after], engine=engine)
    alone = build_fork_context([marker, summary, after], engine=engine)
    assert forked.context == alone.context
    assert forked.stats.final_count == alone.stats.final_count == 2
    # the same message kept (after the summary) is shown, and its fault found
    check([marker, summary, after, dropped], engine, OUTPUT.format(3), LONE)
    # a short string is read for compaction in every message: its fault is found anywhere
    bad_id = {"info": {"id": "漢\ud800"}, "parts": []}
    check([bad_id, marker, summary, after], engine, "messages[0].info.id", LONE)


# --- messages compaction drops: only their heads count ------------------------------------------

_MARKER = user("msg_c", compaction())
_SUMMARY = assistant("msg_s", {"type": "text", "text": "summary"}, parent="msg_c", summary=True)
_AFTER = user("msg_a", {"type": "text", "text": "after"})

#: a message whose head is fine and whose body has one fault, and the path below the message
_BODY_FAULTS = [
    (
        {"info": {"id": "msg_x", "role": "assistant", "error": 5}, "parts": []},
        ".info.error",
        "expected an object",
    ),
    (
        {"info": {"id": "msg_x", "role": "assistant"}, "parts": [5]},
        ".parts[0]",
        "expected an object",
    ),
    (
        {"info": {"id": "msg_x", "role": "assistant"}, "parts": [{"type": 5}]},
        ".parts[0].type",
        "expected a string",
    ),
    (
        {"info": {"id": "msg_x"}, "parts": [{"type": "tool", "state": {"status": 5}}]},
        ".parts[0].state.status",
        "expected a string",
    ),
    (
        {"info": {"id": "msg_x"}, "parts": [{"type": "tool", "state": {"input": nested(70)}}]},
        ".parts[0].state.input",
        "nested deeper than 64 levels",
    ),
    (
        {"info": {"id": "msg_x", "role": "user"}, "parts": [{"type": "text", "text": 5}]},
        ".parts[0].text",
        "expected a string",
    ),
    (
        {
            "info": {"id": "msg_x", "role": "assistant"},
            "parts": [{"type": "compaction", "tail_start_id": 5}],
        },
        ".parts[0].tail_start_id",
        "expected a string",
    ),
]


@pytest.mark.parametrize(("bad", "where", "detail"), _BODY_FAULTS)
def test_a_body_fault_in_a_message_compaction_drops_does_not_count(engine, bad, where, detail):
    """Stage 1 reads each message's head; a fault in the rest (its body) counts only if
    compaction keeps the message (docs/pipeline-contract.md, "Heads and bodies")."""
    alone = build_fork_context([_MARKER, _SUMMARY, _AFTER], engine=engine)
    for data in as_forms([bad, _MARKER, _SUMMARY, _AFTER]):
        forked = build_fork_context(data, engine=engine)
        assert forked.text == alone.text
        moved = {"original_count", "compaction_slice_index"}
        assert forked.stats.model_dump(exclude=moved) == alone.stats.model_dump(exclude=moved)
        assert forked.stats.compaction_slice_index == 2
    # kept after the summary, in the tail, or with no compaction at all: found, by path
    for doc, index in (
        ([_MARKER, _SUMMARY, bad, _AFTER], 2),
        ([bad, user("msg_c", compaction("msg_x")), _SUMMARY, _AFTER], 0),
        ([_AFTER, bad], 1),
    ):
        for data in as_forms(doc):
            check(data, engine, f"messages[{index}]{where}", detail)


@pytest.mark.parametrize(
    ("bad", "where", "detail"),
    [
        (5, "", "expected an object"),
        ({"parts": []}, ".info", "missing"),
        ({"info": {"id": 5}, "parts": []}, ".info.id", "expected a string"),
        (
            {"info": {"role": "assistant", "parentID": 5}, "parts": []},
            ".info.parentID",
            "expected a string",
        ),
        ({"info": {"role": "assistant"}, "parts": 5}, ".parts", "expected an array"),
        ({"info": {"role": "user"}, "parts": [{"text": "x"}]}, ".parts[0].type", "missing"),
        ({"info": {"role": "user"}, "parts": [7]}, ".parts[0]", "expected an object"),
        (
            {"info": {"role": "user"}, "parts": [{"type": "compaction", "tail_start_id": 5}]},
            ".parts[0].tail_start_id",
            "expected a string",
        ),
    ],
)
def test_a_head_fault_is_found_in_every_message(engine, bad, where, detail):
    """A head is what stage 1 reads: wherever compaction puts the message, its fault counts,
    and before any body's, wherever that lies."""
    body = _BODY_FAULTS[0][0]
    for doc in ([bad, _MARKER, _SUMMARY, _AFTER], [body, _MARKER, _SUMMARY, _AFTER, bad]):
        index = doc.index(bad)
        for data in as_forms(doc):
            check(data, engine, f"messages[{index}]{where}", detail)


def test_the_first_head_fault_in_list_order_is_raised_wherever_the_reading_meets_it(engine):
    """The reference reads the messages after the boundary from the newest and the history
    before it by head only, in list order (`_read_heads`): whichever part meets a fault
    first, the first fault in list order is the one raised."""
    type_fault = {"info": {"id": 5, "role": "assistant"}, "parts": []}
    parts_fault = {"info": {"role": "user"}, "parts": [{"type": "text"}, 7]}
    late_fault = {"info": {"role": "assistant", "parentID": 5}, "parts": []}
    history = [user(f"msg_h{i}", {"type": "text", "text": f"old {i}"}) for i in range(4)]
    doc = [
        history[0],
        type_fault,
        history[1],
        parts_fault,
        *history[2:],
        _MARKER,
        _SUMMARY,
        _AFTER,
        late_fault,
    ]
    expected = [
        (1, ".info.id", "expected a string"),
        (2, ".parts[1]", "expected an object"),
        (7, ".info.parentID", "expected a string"),
    ]
    for index, where, detail in expected:
        for data in as_forms(doc):
            check(data, engine, f"messages[{index}]{where}", detail)
        doc.remove(doc[index])


def test_odd_heads_in_a_history_compaction_drops_are_read_like_plain_ones(engine):
    """Heads the reference does not read inline (a dict subclass, a role that is not set, ids
    that are not ASCII, a tuple of parts, a compaction part in a dict subclass) give the same
    fork as plain ones, and a lone surrogate in one is found where it is."""

    class Sub(dict):  # type: ignore[type-arg]
        pass

    plain = [
        user("msg_h0", {"type": "text", "text": "old"}),
        {"info": {"id": "msg_h1"}, "parts": []},
        {"info": {"id": "msg_h2", "role": "assistant", "parentID": "msg_h1"}, "parts": []},
        user("msg_h3", {"type": "text", "text": "old"}, compaction("msg_h0")),
    ]
    odd = [
        Sub(plain[0]),
        {"info": {"id": "msg_h1", "role": None}, "parts": ()},
        {"info": {"id": "msg_h2", "role": "assistant", "parentID": "msg_h1"}, "parts": []},
        {
            "info": Sub(plain[3]["info"]),
            "parts": [{"type": "text", "text": "old"}, Sub(compaction("msg_h0"))],
        },
    ]
    tail = [_MARKER, _SUMMARY, _AFTER]
    expected = build_fork_context([*plain, *tail], engine=engine)
    assert build_fork_context([*odd, *tail], engine=engine) == expected
    assert expected.stats.compaction_slice_index == 5
    # ids that are not ASCII: read and checked by the full reader
    renamed = [
        {**message, "info": {**message["info"], "id": message["info"]["id"] + "é"}}
        for message in plain
    ]
    forked = build_fork_context([*renamed, *tail], engine=engine)
    assert forked.stats.compaction_slice_index == 5
    surrogate = {"info": {"id": "msg_\ud800", "role": "assistant"}, "parts": []}
    lone = "contains a lone surrogate"
    check([*plain[:2], surrogate, *tail], engine, "messages[2].info.id", lone)


@pytest.mark.parametrize("form", ["objects", "json"])
def test_one_session_counts_only_the_body_faults_each_render_keeps(form):
    """`ParsedSession.render` counts a body's fault only if its `kept` holds the message; the
    first fault in list order wins, whatever the order of `kept`."""
    bad = [
        {"info": {"id": "msg_0", "role": "assistant"}, "parts": [{"type": "text", "text": 5}]},
        {"info": {"id": "msg_1"}, "parts": [{"type": "tool", "state": 5}]},
        {"info": {"id": "msg_2"}, "parts": [{"type": "text", "text": "fine"}]},
    ]
    session = _core.from_objects(bad) if form == "objects" else _core.parse_json(json.dumps(bad))
    config = ForkConfig()
    assert session.compaction_view() == (3, [], [])
    assert session.render([2], config).context == (
        "<inherited_context>\nUnknown:\nfine\n</inherited_context>"
    )
    for kept, path in (
        ([1, 2], "messages[1].parts[0].state"),
        ([2, 1, 0], "messages[0].parts[0].text"),
        ([1, 0], "messages[0].parts[0].text"),
    ):
        with pytest.raises(ForkInputError) as info:
            session.render(kept, config)
        assert str(info.value) == (
            f"{path}: expected {'an object' if path.endswith('state') else 'a string'}"
        )
    assert session.render([], config).context == ""


def test_lone_surrogate_in_a_message_the_budget_drops_is_never_read(engine):
    config = ForkConfig(char_budget=20_000, char_no_removal=10_000)
    old = _text("漢" * 5_000 + "\ud800")
    old_output = _output("😀" * 15_000 + "\udfff")  # counted and searched, never shown
    newest = [_text("漢" * 3_000), _output("é" * 4_000)]
    forked = build_fork_context([old, old_output, *newest], config, engine=engine)
    assert forked.stats.final_count == 2
    assert forked.stats.removed_messages == 2
    assert forked.context == build_fork_context(newest, config, engine=engine).context
    # with room for all of them, the first fault in context order is reported
    roomy = ForkConfig(char_budget=100_000, char_no_removal=100_000)
    with pytest.raises(ForkInputError) as info:
        build_fork_context([old, old_output, *newest], roomy, engine=engine)
    assert (info.value.path, info.value.detail) == (TEXT.format(0), LONE)


class _Text(str):
    """A `str` subclass: CPython keeps its characters apart from the object."""


def test_lone_surrogate_in_a_str_subclass_waits_like_the_others(engine):
    bad = _Text("漢" * 100 + "\udc00")
    marker = user("msg_c", compaction())
    summary = assistant("msg_s", {"type": "text", "text": "summary"}, parent="msg_c", summary=True)
    dropped = [_output(bad), _text(bad)]
    alone = build_fork_context([marker, summary], engine=engine)
    assert build_fork_context([*dropped, marker, summary], engine=engine).context == alone.context
    check([marker, summary, *dropped], engine, OUTPUT.format(2), LONE)
    check([marker, summary, _text(_Text("é" + bad))], engine, TEXT.format(2), LONE)


def test_lone_surrogate_in_the_one_message_the_hard_cap_cuts(engine):
    # the newest message alone is too long: its body is cut, and its fault still found,
    # wherever it lies in the body
    config = ForkConfig(char_budget=2_000, char_no_removal=1_000)
    capped = build_fork_context([_text("fine"), _text("漢" * 20_000)], config, engine=engine)
    assert capped.stats.hard_capped
    assert capped.stats.final_count == 1
    for at in (0, 10_000, 19_999):
        value = "漢" * at + "\ud800" + "漢" * (20_000 - at)
        with pytest.raises(ForkInputError) as info:
            build_fork_context([_text("fine" + "\udfff"), _text(value)], config, engine=engine)
        assert (info.value.path, info.value.detail) == (TEXT.format(1), LONE)


#: one result past tier 1 (cut to 3,000 characters) needs five newer ones
_NEWER = [_output("fine") for _ in range(5)]


def _cut_away(value: str, name: str = "read") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A session whose oldest output is `value` (cut by tier 2), and the same with every lone
    surrogate of `value` replaced by another wide character of one code point."""
    clean = value.translate({code: "漢" for code in range(0xD800, 0xE000)})
    return [_output(value, name), *_NEWER], [_output(clean, name), *_NEWER]


@pytest.mark.parametrize("wide", ["\u0100", "漢", "😀"])
def test_lone_surrogate_where_a_cut_drops_it_is_never_read(engine, wide):
    """Only what the context writes of a long text is read for lone surrogates: the head of a
    head-only cut, the head and tail of a head+tail cut."""
    for value, name in (
        (wide * 3_000 + "\ud800" + wide * 2_000, "read"),  # past the head-only cut at 3,000
        (wide * 2_400 + "\udfff" + wide * 2_000, "bash"),  # between head 2,400 and tail 600
        ("error " + wide * 2_394 + "\udc00" + wide * 5_000, "read"),  # an error word: head+tail
    ):
        poisoned, clean = _cut_away(value, name)
        forked = build_fork_context(poisoned, engine=engine)
        assert forked.stats.truncated_results == 1
        assert forked.text == build_fork_context(clean, engine=engine).text
    # written: the head's last character, the tail's first, and anywhere in a tier-1 output
    for value, name in (
        (wide * 2_999 + "\ud800" + wide * 2_000, "read"),
        (wide * 2_401 + "\udfff" + wide * 599, "bash"),
        ("error " + wide * 2_393 + "\udc00" + wide * 5_000, "read"),
    ):
        check(_cut_away(value, name)[0], engine, OUTPUT.format(0), LONE)
    check([_output(wide * 5_000 + "\ud800")], engine, OUTPUT.format(0), LONE)


def test_lone_surrogate_in_a_message_kept_twice_with_two_cuts(engine):
    # stage 1 keeps message 2 twice (in the tail and after the early summary): the newer copy
    # of its output is the newest result, the older the next one, each cut by its own tier
    bad = "漢" * 2_000 + "\ud800" + "漢" * 2_000
    msgs = [
        user("msg_00", {"type": "text", "text": "q0"}),
        assistant("msg_01", {"type": "text", "text": "EARLY"}, parent="msg_03", summary=True),
        {"info": {"id": "msg_02", "role": "assistant"}, "parts": [tool("read", {}, output=bad)]},
        user("msg_03", compaction("msg_00")),
        user("msg_04", {"type": "text", "text": "q4"}),
    ]
    tiers = {"tier1_count": 1, "tier2_count": 1, "tier2_limit": 1_000, "tier3_limit": 100}
    # the newer copy whole: written, found
    with pytest.raises(ForkInputError) as info:
        build_fork_context(msgs, ForkConfig(**tiers), engine=engine)
    assert (info.value.path, info.value.detail) == (OUTPUT.format(2), LONE)
    # both copies cut before it: never written
    cut = ForkConfig(**{**tiers, "tier1_count": 0})
    forked = build_fork_context(msgs, cut, engine=engine)
    assert forked.stats.final_count == 7
    assert forked.stats.truncated_results == 2
    assert "\ud800" not in forked.context
    clean = [*msgs[:2], _output("漢" * 4_001), *msgs[3:]]
    clean[2]["info"]["id"] = "msg_02"
    assert forked.context == build_fork_context(clean, cut, engine=engine).context


def test_lone_surrogate_in_a_text_no_context_writes_is_never_read(engine):
    # a pruned output (the cleared marker is written instead) and an ignored text
    pruned = {
        "info": {"role": "assistant"},
        "parts": [tool("read", {}, output="漢" * 10 + "\ud800", compacted=T0)],
    }
    ignored = {
        "info": {"role": "user"},
        "parts": [
            {"type": "text", "text": "漢\udfff", "ignored": True},
            {"type": "text", "text": "x"},
        ],
    }
    forked = build_fork_context([pruned, ignored], engine=engine)
    assert forked.context == framed(
        block("Agent", "[Tool: read] {}", "[Tool result]\n" + CLEARED), block("User", "x")
    )
    assert forked.stats.compacted_results == 1
    # the same texts written: found
    del pruned["parts"][0]["state"]["time"]["compacted"]
    check([pruned, ignored], engine, OUTPUT.format(0), LONE)
    del ignored["parts"][0]["ignored"]
    check([_text("fine"), ignored], engine, TEXT.format(1), LONE)


def test_lone_surrogate_with_needles_that_are_not_ascii(engine):
    config = ForkConfig(error_patterns=("エラー",), cleared_marker="[消去済み]")
    doc = [_output("漢" * 5000 + "エラー" + "\udfff")]
    with pytest.raises(ForkInputError) as info:
        build_fork_context(doc, config, engine=engine)
    assert (info.value.path, info.value.detail) == (OUTPUT.format(0), LONE)


def test_walked_session_with_a_lone_surrogate_fails_every_render_that_shows_it():
    session = _core.from_objects([_output("漢" * 100), _output("😀" * 5000 + "\ud800")])
    for _ in range(2):
        with pytest.raises(ForkInputError) as info:
            session.render([0, 1], ForkConfig())
        assert (info.value.path, info.value.detail) == (OUTPUT.format(1), LONE)
        # a render that keeps only the other message never reads it
        assert session.render([0], ForkConfig()).final_count == 1
        with pytest.raises(ForkInputError) as info:
            session.render([1, 0], ForkConfig())
        assert info.value.path == OUTPUT.format(1)


def test_walked_session_renders_the_same_twice():
    session = _core.from_objects([_output("漢" * 100), _output("😀" * 5000 + "error")])
    first, second = (session.render([0, 1], ForkConfig()) for _ in range(2))
    assert first.context == second.context
    assert first.head_tail_applied == second.head_tail_applied == 0
    assert first.tier1 == second.tier1 == 2


def test_lone_surrogate_in_unread_field_from_objects_is_fine(engine):
    doc = [{"info": {"title": "\ud800"}, "parts": [{"type": "reasoning", "text": "\ud800"}]}]
    assert build_fork_context(doc, engine=engine).context == framed(block("Unknown"))


@pytest.mark.parametrize(
    ("part", "subpath", "detail"),
    [
        ({"type": "text", "text": b"bytes"}, ".text", "expected a string"),
        ({"type": "text", "text": "a", "ignored": 0}, ".ignored", "expected a boolean"),
        (
            {"type": "tool", "state": {"status": "completed", "time": {"compacted": False}}},
            ".state.time.compacted",
            "expected a number",
        ),
        ({"type": "tool", "state": ("status", "completed")}, ".state", "expected an object"),
    ],
)
def test_python_types_from_objects(engine, part, subpath, detail):
    check([{"info": {}, "parts": [part]}], engine, "messages[0].parts[0]" + subpath, detail)


def test_tuple_of_messages_and_tuple_parts_are_accepted(engine):
    doc = ({"info": {"role": "user"}, "parts": ({"type": "text", "text": "q"},)},)
    assert build_fork_context(list(doc), engine=engine).context == framed(block("User", "q"))


# --- JSON text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[",
        b"[1,]",
        b'[{"info":{},"parts":[]},]',
        b"[] x",
        b"[{'info':{}}]",
        b'[{"info":{"role":"user"},"parts":[{"type":"text","text":"a\x01b"}]}]',
        b'[{"info":{},"parts":[{"type":"tool","state":{"status":"running","input":NaN}}]}]',
        b'[{"info":{},"parts":[{"type":"tool","state":{"status":"running","input":Infinity}}]}]',
        b'[{"info":{},"parts":[{"type":"tool","state":{"status":"running","input":-Infinity}}]}]',
        b'[{"info":{"role":"user"},"parts":[{"type":"text","text":"\\ud800"}]}]',
        b'[{"info":{"role":"user"},"parts":[{"type":"text","text":"\\udc00\\ud800"}]}]',
        b'[{"info":{"x":"\\ud83d"},"parts":[]}]',
        b'[{"\\ud800":1}]',
        b"\xef\xbb\xbf[]",
        b'[{"info":{},"parts":[]}',
        b'[1, {"a"',
        b"[01]",
        b'["\\x"]',
    ],
)
def test_invalid_json(engine, data):
    for form in (data, data.decode("utf-8")):
        err = error_of(form, engine)
        assert err.path == "json"
        assert err.detail.startswith("invalid JSON: "), err.detail


@pytest.mark.parametrize(
    "data",
    [
        b'[{"info":{},"parts":[{"type":"text","text":"\xff"}]}]',
        b'[{"info":{},"parts":[{"type":"text","text":"\xed\xa0\x80"}]}]',
        b'[{"info":{},"parts":[{"type":"text","text":"\xc0\xaf"}]}]',
        b'[{"info":{},"parts":[{"type":"text","text":"\xf0\x9f\x98"}]}]',
        b"[\x80]",
        b'[{"info":{"title":"\xfe"},"parts":[]}]',
    ],
)
def test_invalid_utf8(engine, data):
    check(data, engine, "json", "invalid UTF-8")


def test_lone_surrogate_in_str_input(engine):
    data = '[{"info":{"role":"user"},"parts":[{"type":"text","text":"\ud800"}]}]'
    check(data, engine, "json", "contains a lone surrogate")
    unread = '[{"info":{"title":"\udfff"},"parts":[]}]'
    check(unread, engine, "json", "contains a lone surrogate")


def test_surrogate_pair_escapes_are_fine(engine):
    data = b'[{"info":{"role":"user"},"parts":[{"type":"text","text":"\\ud83d\\ude00 \\u00e9"}]}]'
    assert build_fork_context(data, engine=engine).context == framed(block("User", "😀 é"))


def doc_with_depth(total: int, leaf: Any = 0) -> bytes:
    """A document whose deepest container is at level `total` (the top array is level 1);
    a container `leaf` counts as the deepest level itself."""
    if isinstance(leaf, dict | list):
        inner = nested(total - 4, leaf)
    else:
        inner = nested(total - 3, leaf)  # [ { "info": { "x": <inner> } } ]: 3 levels before it
    return json.dumps([{"info": {"x": inner}, "parts": []}]).encode()


def test_document_at_128_levels_is_fine(engine):
    ctx = build_fork_context(doc_with_depth(128), engine=engine)
    assert ctx.context == framed(block("Unknown"))


@pytest.mark.parametrize("leaf", [{}, {"k": 1}, {"k": "v", "n": None}, []], ids=repr)
def test_document_depth_counts_a_leaf_container_at_the_bottom(engine, leaf):
    # 128 levels with the leaf container as the deepest: fine; one level more: too deep
    assert build_fork_context(doc_with_depth(128, leaf), engine=engine).context
    check(doc_with_depth(129, leaf), engine, "json", "nested deeper than 128 levels")


def test_document_deeper_than_128_levels(engine):
    check(doc_with_depth(129), engine, "json", "nested deeper than 128 levels")
    check(doc_with_depth(129).decode(), engine, "json", "nested deeper than 128 levels")


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_very_deep_documents_do_not_crash(engine, depth):
    data = b"[" * depth + b"]" * depth
    check(data, engine, "json", "nested deeper than 128 levels")
    data = b'{"messages":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    check(data, engine, "json", "nested deeper than 128 levels")


def test_unterminated_deep_document(engine):
    err = error_of(b"[" * 100_000, engine)
    assert err.path == "json"


# --- which error wins ----------------------------------------------------------------------------


def test_syntax_error_beats_earlier_shape_error(engine):
    check_prefix = error_of(b'[1, {"info": 5}, [', engine)
    assert (check_prefix.path, check_prefix.detail.startswith("invalid JSON: ")) == ("json", True)
    err = error_of(b'[{"info": 5, "parts": []}, "\xff"]', engine)
    assert (err.path, err.detail) == ("json", "invalid UTF-8")


def test_depth_beats_shape_and_input_depth(engine):
    # the input is 124 deep: the document reaches 129 levels, a document-wide error
    part = {"type": "tool", "state": {"status": "running", "input": nested(124)}}
    data = json.dumps([1, {"info": {}, "parts": [part]}]).encode()
    check(data, engine, "json", "nested deeper than 128 levels")
    # 123 deep: the document has 128 levels, so the input's own limit reports
    part = {"type": "tool", "state": {"status": "running", "input": nested(123)}}
    data = json.dumps([{"info": {}, "parts": [part]}]).encode()
    check(data, engine, PATH_INPUT, "nested deeper than 64 levels")


def test_lone_surrogate_escape_beats_shape_error(engine):
    err = error_of(b'[5, {"info": {"x": "\\ud800"}, "parts": []}]', engine)
    assert err.path == "json" and err.detail.startswith("invalid JSON: ")


@pytest.mark.parametrize(
    ("doc", "path", "detail"),
    [
        ([{"info": 5, "parts": 5}], "messages[0].info", "expected an object"),
        ([{"parts": 5}], "messages[0].info", "missing"),
        ([{"info": {"role": 5, "id": 5}}], "messages[0].info.role", "expected a string"),
        ([{"info": {"id": 5, "parentID": 5}}], "messages[0].info.id", "expected a string"),
        (
            [{"info": {"parentID": 5, "role": "assistant", "error": 5}}],
            "messages[0].info.parentID",
            "expected a string",
        ),
        (
            # `parts` is read with the head, `info.error` with the body
            [{"info": {"role": "assistant", "error": {"name": 5, "data": 5}}, "parts": 5}],
            "messages[0].parts",
            "expected an array",
        ),
        (
            [{"info": {"role": "assistant", "error": {"name": 5, "data": 5}}, "parts": [5]}],
            "messages[0].info.error.name",
            "expected a string",
        ),
        (
            [{"info": {"role": "assistant", "error": {"data": 5}}, "parts": [5]}],
            "messages[0].info.error.data",
            "expected an object",
        ),
        (
            [{"info": {"role": "user"}, "parts": [5, {}]}],
            "messages[0].parts[0]",
            "expected an object",
        ),
        ([{"info": {}, "parts": [{"text": 5}]}], "messages[0].parts[0].type", "missing"),
        (
            [{"info": {}, "parts": [{"type": "text", "text": 5, "ignored": 5}]}],
            "messages[0].parts[0].text",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "tool", "name": 5, "tool": 5, "state": 5}]}],
            "messages[0].parts[0].tool",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "tool", "state": 5, "name": 5}]}],
            "messages[0].parts[0].name",
            "expected a string",
        ),
        (
            [
                {
                    "info": {},
                    "parts": [{"type": "tool", "state": {"status": 5, "input": nested(70)}}],
                }
            ],
            "messages[0].parts[0].state.status",
            "expected a string",
        ),
        (
            [
                {
                    "info": {},
                    "parts": [
                        {
                            "type": "tool",
                            "state": {"status": "completed", "output": 5, "input": nested(70)},
                        }
                    ],
                }
            ],
            PATH_INPUT,
            "nested deeper than 64 levels",
        ),
        (
            [
                {
                    "info": {},
                    "parts": [
                        {"type": "tool", "state": {"status": "completed", "time": 5, "output": 5}}
                    ],
                }
            ],
            "messages[0].parts[0].state.output",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "tool_result", "name": 5, "tool": 5, "text": 5}]}],
            "messages[0].parts[0].text",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "tool_result", "name": 5, "tool": 5}]}],
            "messages[0].parts[0].tool",
            "expected a string",
        ),
        # every message's head is checked before any body, the first in list order
        (
            [{"info": 5}, {"info": {}, "parts": []}, {"info": {"id": 5}, "parts": []}],
            "messages[0].info",
            "expected an object",
        ),
        (
            [
                {"info": {"id": 5}, "parts": []},
                {"info": {}, "parts": [{"type": "text", "text": 5}]},
            ],
            "messages[0].info.id",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": 5}]}, {"info": 5}],
            "messages[1].info",
            "expected an object",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": 5}]}, {"info": {}, "parts": []}],
            "messages[0].parts[0].text",
            "expected a string",
        ),
        (
            [{"info": {}, "parts": [{"type": "text", "text": "ok"}, {"type": 5}]}, 7],
            "messages[1]",
            "expected an object",
        ),
        # a user message's part types are part of its head (stage 1 looks for its markers)
        (
            [{"info": {"role": "user"}, "parts": [{"type": 5}]}, {"info": 5}],
            "messages[0].parts[0].type",
            "expected a string",
        ),
        (
            [{"info": {"role": "user"}, "parts": [{"type": "text", "text": 5}, {"type": 5}]}, 7],
            "messages[0].parts[1].type",
            "expected a string",
        ),
        (
            [
                {"info": {"role": "user"}, "parts": [{"type": "text", "text": 5}]},
                {"info": {"role": "user"}, "parts": [{"type": "compaction", "tail_start_id": 5}]},
            ],
            "messages[1].parts[0].tail_start_id",
            "expected a string",
        ),
    ],
)
def test_first_fault_in_check_order(engine, doc, path, detail):
    for data in as_forms(doc):
        check(data, engine, path, detail)


# --- never crash, same answer from both engines --------------------------------------------------


def outcome(data: Any, engine: str) -> tuple:
    try:
        ctx = build_fork_context(data, engine=engine)
    except ForkInputError as err:
        detail = "invalid JSON: …" if err.detail.startswith("invalid JSON: ") else err.detail
        return ("error", err.path, detail)
    return ("ok", ctx.text, ctx.stats.model_dump())


def same_outcome(data: Any) -> None:
    assert outcome(data, "rust") == outcome(data, "python")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes(data):
    same_outcome(data)


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(
        [
            "text",
            "tool",
            "tool_result",
            "compaction",
            "user",
            "assistant",
            "completed",
            "error",
            "running",
        ]
    ),
)
KEYS = st.sampled_from(
    [
        "info",
        "parts",
        "role",
        "id",
        "parentID",
        "type",
        "text",
        "tool",
        "name",
        "state",
        "status",
        "input",
        "output",
        "error",
        "time",
        "compacted",
        "ignored",
        "summary",
        "data",
        "message",
        "tail_start_id",
        "messages",
        "x",
    ]
)
JSONISH = st.recursive(
    JSON_LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH)
def test_random_json_shapes(doc):
    same_outcome(doc)
    same_outcome(json.dumps(doc).encode())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH, st.integers(min_value=0, max_value=40), st.binary(min_size=1, max_size=3))
def test_corrupted_json_bytes(doc, cut, junk):
    data = json.dumps(
        [doc, {"info": {"role": "user"}, "parts": [{"type": "text", "text": "é😀"}]}]
    ).encode()
    position = min(cut, len(data))
    same_outcome(data[:position] + junk + data[position:])
    same_outcome(data[:position])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=120))
def test_random_str_input(data):
    same_outcome(data)
    same_outcome("[" + data + "]")
    same_outcome('[{"info":{},"parts":[{"type":"text","text":"' + data + '"}]}]')


class _Uncomparable:
    """A value that fails when compared: it must meet the type checks, never a comparison."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("field", ["role", "id", "parentID"])
def test_odd_objects_get_the_type_error_not_a_crash(engine, field):
    marker = {"type": "compaction", "tail_start_id": "msg_0"}
    msgs = [
        {"info": {"id": "msg_0", "role": "user"}, "parts": [OK_PART]},
        {"info": {"id": "msg_1", "role": "user"}, "parts": [marker]},
        {"info": {"role": "assistant", "summary": True, field: _Uncomparable()}, "parts": []},
    ]
    check(msgs, engine, f"messages[2].info.{field}", "expected a string")


def _tool_message(value: Any) -> dict[str, Any]:
    state = {"status": "completed", "input": value, "output": "done"}
    part = {"type": "tool", "tool": "read", "state": state}
    return {"info": {"id": "msg_t", "role": "assistant"}, "parts": [part]}


def test_walked_parameters_are_dumped_when_rendered_from_what_was_checked() -> None:
    """From objects the Rust engine checks `state.input` while walking and dumps it only for
    the messages it measures: the text is the one json.dumps gives, cut to the preview."""
    from asyncagents import _core
    from asyncagents.config import DEFAULT_CONFIG

    value = {"path": "/a/é", "n": [1, 2.5, None, True], "deep": {"k": "x" * 600}}
    session = _core.from_objects([_tool_message(value)])
    out = session.render([0], DEFAULT_CONFIG)
    dumped = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert out.context == (
        f"<inherited_context>\nAgent:\n[Tool: read] {dumped[:500]}...\n[Tool result]\ndone"
        "\n</inherited_context>"
    )


def test_a_parameter_changed_into_non_json_before_the_render_is_an_error() -> None:
    """The caller's objects are read twice (walk, then render): a value changed in between
    into something that is not JSON gives a RuntimeError, never a crash or a wrong dump."""
    from asyncagents import _core
    from asyncagents.config import DEFAULT_CONFIG

    value: dict[str, Any] = {"path": "/a"}
    session = _core.from_objects([_tool_message(value)])
    value["path"] = {1, 2}
    with pytest.raises(RuntimeError, match=r"state\.input value changed"):
        session.render([0], DEFAULT_CONFIG)


@pytest.mark.parametrize("container", ["list", "dict"])
def test_a_parameter_changed_into_a_cycle_before_the_render_is_an_error(container) -> None:
    """A value that holds itself (made after the walk) would never end with no preview limit:
    past the walk's 64 levels the dump stops with the same RuntimeError, not a stack overflow."""
    from asyncagents import _core
    from asyncagents.config import ForkConfig

    value: Any = [] if container == "list" else {}
    session = _core.from_objects([_tool_message(value)])
    if container == "list":
        value.append(value)
    else:
        value["self"] = value
    unlimited = ForkConfig(params_tier1=10**30)
    with pytest.raises(RuntimeError, match=r"state\.input value changed"):
        session.render([0], unlimited)
    # a preview that is full before the depth matters shows what it reached
    out = session.render([0], ForkConfig(params_tier1=10))
    preview = "[" * 10 if container == "list" else '{"self":{"'
    assert out.context == (
        f"<inherited_context>\nAgent:\n[Tool: read] {preview}...\n[Tool result]\ndone"
        "\n</inherited_context>"
    )
