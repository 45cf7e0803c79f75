"""Stage 3 formatting: labels, lines per part, tool call lines, parameter JSON, error lines."""

from __future__ import annotations

import json
import sys

import pytest
from asyncagents import build_fork_context
from fork_builders import (
    MISSING,
    assistant,
    block,
    compaction,
    framed,
    message,
    patch,
    reasoning,
    step_finish,
    step_start,
    text,
    tool,
    tool_result,
    user,
)


def test_no_messages_gives_empty_text(fork):
    ctx = fork([])
    assert (ctx.text, ctx.preamble, ctx.context) == ("", "", "")
    assert ctx.stats.original_count == 0
    assert ctx.stats.final_count == 0
    assert ctx.stats.total_chars == 0
    assert ctx.stats.compaction_slice_index == -1
    assert ctx.stats.compaction_detected is False


@pytest.mark.parametrize(
    "data", [b"[]", "[]", b'{"info": {"id": "ses_x"}, "messages": []}', b" [ ] "]
)
def test_empty_json_documents(engine, data):
    ctx = build_fork_context(data, engine=engine)
    assert (ctx.text, ctx.preamble, ctx.context) == ("", "", "")


def test_user_and_agent_labels(fork):
    ctx = fork([user("msg_1", text("hello")), assistant("msg_2", text("hi there"))])
    assert (
        ctx.context == "<inherited_context>\nUser:\nhello\nAgent:\nhi there\n</inherited_context>"
    )


@pytest.mark.parametrize(
    ("role", "label"),
    [
        ("system", "System"),
        ("tool", "Tool"),
        ("x", "X"),
        ("Assistant", "Assistant"),
        ("USER", "USER"),
        ("élan", "Élan"),
        ("ßeta", "SSeta"),
        ("ǆ", "Ǆ"),
        ("1st", "1st"),
        ("日本", "日本"),
        ("", "Unknown"),
        (None, "Unknown"),
        (MISSING, "Unknown"),
    ],
)
def test_other_role_labels(fork, role, label):
    ctx = fork([message(role, "msg_1", text("body"))])
    assert ctx.context == f"<inherited_context>\n{label}:\nbody\n</inherited_context>"


def test_message_with_no_lines_keeps_its_label(fork):
    ctx = fork(
        [
            user("msg_1", text("go")),
            assistant("msg_2", step_start(), reasoning("thinking hard"), step_finish()),
            user("msg_3"),
        ]
    )
    assert ctx.context == framed(block("User", "go"), block("Agent"), block("User"))
    assert ctx.stats.final_count == 3


def test_text_parts_each_on_their_own_line(fork):
    ctx = fork([assistant("msg_1", text("first\nsecond"), text("third"))])
    assert ctx.context == "<inherited_context>\nAgent:\nfirst\nsecond\nthird\n</inherited_context>"


def test_empty_text_is_skipped(fork):
    ctx = fork([assistant("msg_1", text(""), text("kept"), {"type": "text"})])
    assert ctx.context == framed(block("Agent", "kept"))


def test_ignored_text_is_dropped_and_synthetic_text_is_kept(fork):
    ctx = fork(
        [
            user(
                "msg_1",
                text("hidden", ignored=True),
                text("shown", ignored=False),
                text("Continue if you have next steps", synthetic=True),
                text("null ignored", ignored=None),
            )
        ]
    )
    assert ctx.context == framed(
        block("User", "shown", "Continue if you have next steps", "null ignored")
    )


def test_reasoning_and_bookkeeping_parts_render_nothing(fork):
    ctx = fork(
        [
            assistant(
                "msg_1",
                step_start(),
                reasoning("secret chain of thought"),
                text("answer"),
                patch("/tmp/proj/a.py"),
                {"type": "file", "mime": "text/plain", "url": "file:///a"},
                {"type": "subtask", "prompt": "x"},
                {"type": "brand-new-part", "text": "unknown part type"},
                step_finish(),
            )
        ]
    )
    assert ctx.context == framed(block("Agent", "answer"))
    assert "secret" not in ctx.text


def test_completed_tool_call_and_result(fork):
    ctx = fork(
        [
            assistant(
                "msg_1",
                tool("bash", {"command": "ls", "description": "List files"}, output="a.py\nb.py"),
            )
        ]
    )
    assert ctx.context == (
        "<inherited_context>\nAgent:\n"
        '[Tool: bash] {"command":"ls","description":"List files"}\n'
        "[Tool result]\na.py\nb.py"
        "\n</inherited_context>"
    )


def test_completed_tool_without_output_has_an_empty_result(fork):
    ctx = fork([assistant("msg_1", tool("read", {"filePath": "/a"}))])
    assert ctx.context == framed(
        block("Agent", '[Tool: read] {"filePath":"/a"}', "[Tool result]\n")
    )
    assert ctx.stats.tier_distribution.tier1 == 1


def test_error_tool_result_is_its_error_text(fork):
    ctx = fork(
        [
            assistant(
                "msg_1", tool("read", {"filePath": "/x"}, status="error", error="File not found")
            )
        ]
    )
    assert ctx.context == framed(
        block("Agent", '[Tool: read] {"filePath":"/x"}', "[Tool result]\nFile not found")
    )


@pytest.mark.parametrize("status", ["pending", "running"])
def test_pending_and_running_tools_have_no_result(fork, status):
    ctx = fork([assistant("msg_1", tool("bash", {"command": "sleep 45"}, status=status))])
    assert ctx.context == framed(block("Agent", '[Tool: bash] {"command":"sleep 45"}'))
    assert ctx.stats.tier_distribution.tier1 == 0


def test_unknown_status_has_no_result(fork):
    part = tool("bash", state={"status": "queued", "input": {"a": 1}, "output": "nope"})
    ctx = fork([assistant("msg_1", part)])
    assert ctx.context == framed(block("Agent", '[Tool: bash] {"a":1}'))


def test_tool_name_falls_back_to_name_then_unknown(fork):
    ctx = fork(
        [
            assistant(
                "msg_1",
                tool(None, {}, name_field="grep", output="x"),
                tool(None, {}, output="y"),
                tool("glob", {}, name_field="ignored", output="z"),
            )
        ]
    )
    assert ctx.context == framed(
        block(
            "Agent",
            "[Tool: grep] {}",
            "[Tool result]\nx",
            "[Tool: unknown] {}",
            "[Tool result]\ny",
            "[Tool: glob] {}",
            "[Tool result]\nz",
        )
    )


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (MISSING, "[Tool: read]"),
        ({}, "[Tool: read] {}"),
        (None, "[Tool: read] null"),
        ([], "[Tool: read] []"),
        ([1, "a"], '[Tool: read] [1,"a"]'),
        ("plain", '[Tool: read] "plain"'),
        (7, "[Tool: read] 7"),
        (True, "[Tool: read] true"),
    ],
)
def test_tool_parameter_line(fork, value, rendered):
    ctx = fork([assistant("msg_1", tool("read", value, status="running"))])
    assert ctx.context == framed(block("Agent", rendered))


def test_parameter_json_is_compact_ordered_and_not_ascii_escaped(fork):
    params = {
        "zeta": 1,
        "alpha": [1, 2.5, -3],
        "ключ": "值 😀 e\u0301",
        "quote": 'say "hi"\\',
        "ctrl": "a\nb\tc\x01\x1f\x7f\u2028",
        "nested": {"b": None, "a": False},
    }
    ctx = fork([assistant("msg_1", tool("edit", params, status="running"))])
    expected = (
        '[Tool: edit] {"zeta":1,"alpha":[1,2.5,-3],"ключ":"值 😀 e\u0301",'
        '"quote":"say \\"hi\\"\\\\","ctrl":"a\\nb\\tc\\u0001\\u001f\x7f\u2028",'
        '"nested":{"b":null,"a":false}}'
    )
    assert ctx.context == framed(block("Agent", expected))


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (1e16, "1e+16"),
        (1e-05, "1e-05"),
        (0.1, "0.1"),
        (100000.0, "100000.0"),
        (-0.0, "-0.0"),
        (1.5e300, "1.5e+300"),
        (123456789.123456789, "123456789.12345679"),
        (2**64 + 1, "18446744073709551617"),
        (-(10**30), "-1000000000000000000000000000000"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (float("nan"), "NaN"),
    ],
)
def test_numbers_in_parameters_from_objects(engine, value, rendered):
    msgs = [assistant("msg_1", tool("calc", {"v": value}, status="running"))]
    ctx = build_fork_context(msgs, engine=engine)
    assert ctx.context == framed(block("Agent", '[Tool: calc] {"v":' + rendered + "}"))


@pytest.mark.parametrize(
    ("literal", "rendered"),
    [
        ("1e16", "1e+16"),
        ("1E2", "100.0"),
        ("0.1e1", "1.0"),
        ("1.0", "1.0"),
        ("-0", "0"),
        ("-0.0", "-0.0"),
        ("1e400", "Infinity"),
        ("-1e400", "-Infinity"),
        ("1e-400", "0.0"),
        ("0.000012", "1.2e-05"),
        ("123456789012345678901234567890", "123456789012345678901234567890"),
        ("12345678901234567.0", "1.2345678901234568e+16"),
        ('"\\u00e9\\ud83d\\ude00\\/"', '"é😀/"'),
        ('{"a":1,"b":2,"a":3}', '{"a":3,"b":2}'),
    ],
)
def test_numbers_and_strings_in_parameters_from_json(engine, literal, rendered):
    doc = (
        '[{"info":{"id":"msg_1","role":"assistant"},"parts":[{"type":"tool","tool":"calc",'
        '"state":{"status":"running","input":{"v":' + literal + "}}}]}]"
    )
    for data in (doc.encode(), doc):
        ctx = build_fork_context(data, engine=engine)
        assert ctx.context == framed(block("Agent", '[Tool: calc] {"v":' + rendered + "}"))


def test_tuple_in_objects_renders_as_array(engine):
    msgs = [assistant("msg_1", tool("calc", {"v": (1, (2, "x"))}, status="running"))]
    ctx = build_fork_context(msgs, engine=engine)
    assert ctx.context == framed(block("Agent", '[Tool: calc] {"v":[1,[2,"x"]]}'))


def test_error_line_comes_last(fork):
    err = {"name": "APIError", "data": {"message": "Bad Request", "statusCode": 400}}
    ctx = fork([assistant("msg_1", text("partial"), tool("bash", {}, output="o"), error=err)])
    assert ctx.context == framed(
        block(
            "Agent",
            "partial",
            "[Tool: bash] {}",
            "[Tool result]\no",
            "[Error: APIError] Bad Request",
        )
    )


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            {"name": "MessageAbortedError", "data": {"message": "Aborted"}},
            "[Error: MessageAbortedError] Aborted",
        ),
        ({"name": "UnknownError"}, "[Error: UnknownError]"),
        ({"name": "UnknownError", "data": {}}, "[Error: UnknownError]"),
        ({"name": "UnknownError", "data": {"message": ""}}, "[Error: UnknownError]"),
        ({"name": "UnknownError", "data": None}, "[Error: UnknownError]"),
        ({"data": {"message": "boom"}}, "[Error: Error] boom"),
        ({"name": "", "data": {"message": "boom"}}, "[Error: Error] boom"),
        ({"name": None, "data": {"message": None}}, "[Error: Error]"),
        ({}, "[Error: Error]"),
    ],
)
def test_error_line_variants(fork, error, line):
    ctx = fork([assistant("msg_1", error=error)])
    assert ctx.context == framed(block("Agent", line))


def test_error_is_only_read_on_assistant_messages(fork):
    msgs = [
        user("msg_1", text("q"), error={"name": "APIError", "data": {"message": "x"}}),
        assistant("msg_2", text("a"), error=None),
    ]
    ctx = fork(msgs)
    assert ctx.context == framed(block("User", "q"), block("Agent", "a"))


def test_legacy_tool_result_parts(fork):
    ctx = fork(
        [
            assistant(
                "msg_1",
                tool("read", state=None),
                tool_result("file body", tool="read"),
                tool_result(""),
                tool_result(),
                tool_result("orphan result"),
            )
        ]
    )
    assert ctx.context == framed(
        block("Agent", "[Tool: read]", "[Tool result]\nfile body", "[Tool result]\norphan result")
    )
    assert ctx.stats.tier_distribution.tier1 == 2


def test_compaction_part_renders_nothing(fork):
    ctx = fork([user("msg_1", text("q"), compaction("msg_0"))])
    assert ctx.context == framed(block("User", "q"))
    assert ctx.stats.compaction_detected is False


def test_unknown_fields_are_ignored(fork):
    msgs = [user("msg_1", text("q", metadata={"x": [1, {"y": None}]}), futureField={"a": 1})]
    msgs[0]["extra"] = [1, 2, 3]
    ctx = fork(msgs)
    assert ctx.context == framed(block("User", "q"))


def test_export_document_is_accepted(engine):
    msgs = [user("msg_1", text("q")), assistant("msg_2", text("a"))]
    doc = {"info": {"id": "ses_x", "title": "t"}, "messages": msgs}
    as_list = build_fork_context(msgs, engine=engine)
    assert build_fork_context(doc, engine=engine) == as_list
    assert build_fork_context(json.dumps(doc).encode(), engine=engine) == as_list
    assert build_fork_context(json.dumps(doc), engine=engine) == as_list


def test_str_and_bytes_inputs_agree(engine):
    msgs = [
        user("msg_1", text("héllo 😀")),
        assistant("msg_2", tool("bash", {"c": "ü"}, output="ö")),
    ]
    expected = framed(
        block("User", "héllo 😀"), block("Agent", '[Tool: bash] {"c":"ü"}', "[Tool result]\nö")
    )
    for data in (
        json.dumps(msgs),
        json.dumps(msgs, ensure_ascii=False),
        json.dumps(msgs).encode(),
        json.dumps(msgs, ensure_ascii=False).encode(),
        msgs,
    ):
        assert build_fork_context(data, engine=engine).context == expected


def test_message_models_are_accepted(engine):
    from asyncagents.models import Message

    msgs = [
        user("msg_1", text("q")),
        assistant("msg_2", tool("read", {}, output="o"), tool("bash", status="running")),
    ]
    models = [Message.model_validate(m) for m in msgs]
    ctx = build_fork_context(models, engine=engine)
    assert ctx.context == framed(
        block("User", "q"),
        block("Agent", "[Tool: read] {}", "[Tool result]\no", "[Tool: bash]"),
    )
    assert ctx == build_fork_context(msgs, engine=engine)


_ASCII16 = "0123456789abcdef"


@pytest.mark.parametrize(
    "body",
    [
        "plain ascii",
        "é",  # Latin-1: one byte per character
        f"{_ASCII16}ÿ{_ASCII16}{_ASCII16}x",
        "日本語 Ω ß",  # the BMP: two bytes per character
        f"{_ASCII16}\u0800{_ASCII16}\uffff",
        "😀",  # astral: four bytes per character
        f"e\u0301{_ASCII16}{_ASCII16}🚀\U0010ffff\u0080",
    ],
)
def test_context_str_has_every_character_and_python_s_own_width(fork, body):
    ctx = fork([user("msg_1", text(body))])
    want = f"<inherited_context>\nUser:\n{body}\n</inherited_context>"
    assert ctx.context == want
    assert ctx.text.endswith("\n\n" + want)
    # the narrowest layout that holds the widest character, as CPython builds it
    assert sys.getsizeof(ctx.context) == sys.getsizeof(want)
