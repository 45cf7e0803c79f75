"""Hypothesis: both engines give the same text and stats for random sessions, from dicts and from
JSON bytes/str; the budget holds; bytes input equals dict input."""

from __future__ import annotations

import copy
import json
from typing import Any

from asyncagents import ForkConfig, ForkContext, ForkInputError, build_fork_context
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SPECIAL = [
    "😀",
    "漢",
    "字",
    "e\u0301",
    "\u0301",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001d518",
    "\U00010348",
    "ß",
    "ǆ",
    "\u2028",
    "\x00",
    "\x1f",
    "\x7f",
    '"',
    "\\",
    "\n",
    "\t",
    "error",
    "Error",
    "FAILED",
    "traceback",
    "[Old tool result content cleared]",
]
CHARS = st.characters(exclude_categories=("Cs",))
SHORT = st.text(CHARS, max_size=12) | st.sampled_from(SPECIAL)
PIECE = st.lists(SHORT, max_size=6).map("".join)
# empty, short, and large (repeated) texts
TEXT = st.one_of(
    st.just(""),
    PIECE,
    st.builds(lambda s, n: s * n, PIECE.filter(bool), st.integers(1, 2_000)),
)
IDS = [f"msg_{i}" for i in range(8)]
ID = st.sampled_from(IDS)

JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.1, 1e16, 1e-05, 100000.0, -0.0, 1.5e300, 5e-324, 1e22, 1e21]),
    PIECE,
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(SHORT, children, max_size=4),
    ),
    max_leaves=20,
)


def maybe(strategy: st.SearchStrategy, *absent: Any) -> st.SearchStrategy:
    """`strategy`, or the key left out (``...``), or one of `absent` (e.g. None)."""
    return st.one_of(st.just(...), st.sampled_from(absent) if absent else st.nothing(), strategy)


def drop_ellipsis(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if v is not ...}


@st.composite
def tool_part(draw: st.DrawFn) -> dict:
    status = draw(st.sampled_from(["completed", "completed", "error", "pending", "running", "x"]))
    state: dict[str, Any] = {"status": status, "input": draw(maybe(JSON_VALUE, None))}
    if status == "completed":
        state["output"] = draw(maybe(TEXT, None))
        state["time"] = drop_ellipsis(
            {
                "start": 1,
                "end": 2,
                "compacted": draw(maybe(st.integers(0, 2**41) | st.floats(1, 1e13), None)),
            }
        )
    elif status == "error":
        state["error"] = draw(maybe(TEXT, None))
    name = st.sampled_from(["bash", "read", "grep", "edit", "pty_x", "exec", "invalid", "Bash"])
    part = {
        "type": "tool",
        "callID": "call_1",
        "tool": draw(maybe(name | SHORT, None)),
        "name": draw(maybe(name, None)),
        "state": draw(st.sampled_from([drop_ellipsis(state), drop_ellipsis(state), ...])),
    }
    return drop_ellipsis(part)


@st.composite
def legacy_call(draw: st.DrawFn) -> list[dict]:
    """The older shape: a `tool` part whose state has `input` and no `status`, its output in the
    `tool_result` part that follows (sometimes missing, empty, or after another call)."""
    long_input = st.builds(lambda s, n: {"command": s * n}, PIECE.filter(bool), st.integers(1, 300))
    value = draw(JSON_VALUE | long_input)
    state = drop_ellipsis({"input": value, "status": draw(maybe(st.none())), "x": 1})
    call = drop_ellipsis({"type": "tool", "tool": draw(maybe(st.sampled_from(["bash", "read"])))})
    call["state"] = state
    results = draw(
        st.lists(
            st.builds(
                lambda t, tool: drop_ellipsis({"type": "tool_result", "text": t, "tool": tool}),
                TEXT,
                maybe(st.sampled_from(["grep", "exec"])),
            ),
            max_size=2,
        )
    )
    return [call, *results]


PART = st.one_of(
    st.builds(
        lambda t, ignored, synthetic: drop_ellipsis(
            {"type": "text", "text": t, "ignored": ignored, "synthetic": synthetic}
        ),
        maybe(TEXT, None),
        maybe(st.booleans(), None),
        maybe(st.booleans()),
    ),
    st.builds(lambda t: {"type": "reasoning", "text": t}, TEXT),
    tool_part(),
    tool_part(),
    st.builds(
        lambda t, tool, name: drop_ellipsis(
            {"type": "tool_result", "text": t, "tool": tool, "name": name}
        ),
        maybe(TEXT, None),
        maybe(st.sampled_from(["bash", "read"]), None),
        maybe(st.sampled_from(["exec", "grep"]), None),
    ),
    st.builds(
        lambda tail, auto: drop_ellipsis(
            {"type": "compaction", "auto": auto, "tail_start_id": tail}
        ),
        maybe(ID | SHORT, None),
        st.booleans(),
    ),
    st.sampled_from([{"type": "step-start"}, {"type": "step-finish", "reason": "stop"}]),
    st.just({"type": "patch", "hash": "h", "files": ["/a"]}),
)

ROLE = st.one_of(
    st.sampled_from(["user", "assistant", "user", "assistant", "system", "tool", "", None]),
    st.text(CHARS, max_size=6),
    st.just(...),
)
ERROR = st.one_of(
    st.just(...),
    st.none(),
    st.builds(
        lambda name, message: drop_ellipsis(
            {"name": name, "data": drop_ellipsis({"message": message, "statusCode": 400})}
        ),
        maybe(st.sampled_from(["APIError", "MessageAbortedError", ""]) | SHORT, None),
        maybe(PIECE, None),
    ),
)


@st.composite
def message(draw: st.DrawFn) -> dict:
    role = draw(ROLE)
    info = {
        "id": draw(maybe(ID, None)),
        "sessionID": "ses_p",
        "role": role,
        "parentID": draw(maybe(ID, None)),
        "summary": draw(
            maybe(st.sampled_from([True, True, False, 1, "true", {"diffs": []}]), None)
        ),
        "error": draw(ERROR),
        "time": {"created": 1},
    }
    parts = draw(st.lists(PART, max_size=5))
    return {"info": drop_ellipsis(info), "parts": parts}


SESSION = st.lists(message(), max_size=12)


@st.composite
def legacy_message(draw: st.DrawFn) -> dict:
    """An assistant message of older-shape calls mixed with ordinary parts."""
    groups = draw(st.lists(legacy_call() | PART.map(lambda p: [p]), min_size=1, max_size=5))
    return {"info": {"role": "assistant"}, "parts": [p for group in groups for p in group]}


LEGACY_SESSION = st.lists(legacy_message() | message(), min_size=1, max_size=10)


# needles for the searches: the empty string (found in every text, as Python's `in` finds
# it), non-ASCII ones (searched in the strings' own widths), ones that JSON escapes hide
NEEDLE = st.sampled_from(
    ["", "e", "rr", "error", "漢", "😀", "e\u0301", "\u0301", '"', "\\", "\n", "/", "[Old"]
) | st.text(CHARS, min_size=1, max_size=3)
NEEDLES = st.lists(NEEDLE, max_size=4).map(tuple)


@st.composite
def config(draw: st.DrawFn) -> ForkConfig | None:
    if draw(st.booleans()):
        return None
    budget = draw(st.integers(0, 6_000))
    texts: dict[str, Any] = {}
    if draw(st.booleans()):
        head = draw(st.sampled_from([0.0, 0.1, 1 / 3, 0.5, 0.7, 0.8, 1.0]))
        tail = draw(st.sampled_from([0.0, 0.2, 0.17, 0.3, 0.5]))
        texts = {
            "head_ratio": head,
            "tail_ratio": min(tail, 1.0 - head),
            "error_patterns": draw(NEEDLES),
            "head_tail_keywords": draw(NEEDLES),
            "cleared_marker": draw(NEEDLE | st.just("[Old tool result content cleared]")),
        }
    return ForkConfig(
        char_budget=budget,
        char_no_removal=draw(st.integers(0, budget)),
        tier1_count=draw(st.integers(0, 6)),
        tier2_count=draw(st.integers(0, 6)),
        tier2_limit=draw(st.integers(0, 400)),
        tier3_limit=draw(st.integers(0, 120)),
        params_tier1=draw(st.integers(0, 60)),
        params_tier2=draw(st.integers(0, 40)),
        params_tier3=draw(st.integers(0, 20)),
        fork_turns=draw(st.none() | st.integers(1, 4)),
        **texts,
    )


def run(data: Any, cfg: ForkConfig | None, engine: str) -> ForkContext:
    return build_fork_context(data, config=cfg, engine=engine)


def check_invariants(ctx: ForkContext, msgs: list, cfg: ForkConfig | None) -> None:
    s = ctx.stats
    assert s.original_count == len(msgs)
    assert s.total_chars == len(ctx.context)
    if ctx.context:
        assert ctx.text == ctx.preamble + "\n\n" + ctx.context
        assert ctx.context.startswith("<inherited_context>\n")
        assert ctx.context.endswith("\n</inherited_context>")
    else:
        assert ctx.text == ctx.preamble == ""
    budget = (cfg or ForkConfig()).char_budget
    if budget >= 1_000:
        assert s.total_chars <= budget
    assert s.final_count >= (1 if ctx.context else 0)
    assert s.compaction_detected == (s.compaction_slice_index >= 0)


@SETTINGS
@given(SESSION, config())
def test_engines_agree_on_dicts(msgs, cfg):
    rust = run(msgs, cfg, "rust")
    python = run(msgs, cfg, "python")
    assert rust.text == python.text
    assert rust.stats.model_dump() == python.stats.model_dump()
    check_invariants(rust, msgs, cfg)


@SETTINGS
@given(SESSION, config(), st.booleans(), st.booleans(), st.booleans())
def test_engines_agree_on_json_and_json_equals_dicts(msgs, cfg, ensure_ascii, as_bytes, export):
    doc: Any = {"info": {"id": "ses_p"}, "messages": msgs} if export else msgs
    text = json.dumps(doc, ensure_ascii=ensure_ascii)
    data = text.encode() if as_bytes else text
    rust = run(data, cfg, "rust")
    python = run(data, cfg, "python")
    assert rust == python
    assert run(msgs, cfg, "python") == python
    check_invariants(rust, msgs, cfg)


@SETTINGS
@given(LEGACY_SESSION, config(), st.booleans())
def test_engines_agree_on_legacy_calls(msgs, cfg, as_json):
    data = json.dumps(msgs).encode() if as_json else msgs
    rust = run(data, cfg, "rust")
    assert rust == run(data, cfg, "python")
    check_invariants(rust, msgs, cfg)


@SETTINGS
@given(st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=8), st.integers(1_000, 3_000))
def test_budget_holds_for_big_sessions(pairs, budget):
    msgs = [
        {
            "info": {"role": "assistant"},
            "parts": [
                {"type": "text", "text": a * 3},
                {
                    "type": "tool",
                    "tool": "bash",
                    "state": {"status": "completed", "input": {"c": a}, "output": b * 5},
                },
            ],
        }
        for a, b in pairs
    ]
    cfg = ForkConfig(char_budget=budget, char_no_removal=budget // 3)
    rust = run(msgs, cfg, "rust")
    assert rust == run(msgs, cfg, "python")
    assert rust.stats.total_chars <= budget
    check_invariants(rust, msgs, cfg)


NON_FINITE = st.recursive(
    st.one_of(
        st.floats(),  # NaN and infinities allowed: only Python objects can carry them
        st.sampled_from([float("nan"), float("inf"), float("-inf")]),
        JSON_SCALAR,
    ),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(SHORT, children, max_size=3),
    max_leaves=10,
)


@SETTINGS
@given(NON_FINITE, st.integers(0, 600))
def test_non_finite_floats_from_objects(value, limit):
    msgs = [
        {"info": {}, "parts": [{"type": "tool", "state": {"status": "running", "input": value}}]}
    ]
    cfg = ForkConfig(params_tier1=limit)
    rust = run(msgs, cfg, "rust")
    assert rust == run(msgs, cfg, "python")
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if len(expected) > limit:
        expected = expected[:limit] + "..."
    assert rust.context == "<inherited_context>\nUnknown:\n[Tool: unknown] " + expected + (
        "\n</inherited_context>"
    )


@SETTINGS
@given(JSON_VALUE, st.booleans())
def test_parameter_json_matches_python_json_dumps(value, ensure_ascii):
    msgs = [
        {"info": {}, "parts": [{"type": "tool", "state": {"status": "running", "input": value}}]}
    ]
    cfg = ForkConfig(params_tier1=10**9)
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    data = json.dumps(msgs, ensure_ascii=ensure_ascii).encode()
    for engine in ("rust", "python"):
        for form in (msgs, data):
            ctx = run(form, cfg, engine)
            assert ctx.context == (
                "<inherited_context>\nUnknown:\n[Tool: unknown] "
                + expected
                + "\n</inherited_context>"
            )


@SETTINGS
@given(JSON_VALUE | NON_FINITE)
def test_the_references_parameter_dump_is_json_dumps_with_or_without_the_c_encoder(value):
    """`dump_input` calls the standard library's C encoder directly, and `JSONEncoder.encode`
    where there is none: both give exactly `json.dumps`."""
    from asyncagents.reference import session

    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert session._C_ENCODE is not None  # CPython has it: the common path is the one tested
    assert session.dump_input(value) == expected
    c_encode = session._C_ENCODE
    try:
        session._C_ENCODE = None
        assert session.dump_input(value) == expected
    finally:
        session._C_ENCODE = c_encode


SPACE = st.sampled_from(["", " ", "\n", "\t", "\r\n  ", "  "])
NUMBER_TEXT = st.sampled_from(
    [
        "0",
        "-0",
        "12",
        "-7",
        "1.5",
        "-0.0",
        "1e5",
        "1E+2",
        "2.5e-3",
        "100000000000000000000",
        "1e400",
    ]
)


def _escaped_key(key: str, draw: st.DrawFn) -> str:
    """A key literal written plainly, with `\\uXXXX` for every character, or with `\\/`."""
    style = draw(st.sampled_from(["plain", "ascii", "unicode"]))
    if style == "unicode":
        return (
            '"'
            + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in key)
            + '"'
        )
    return json.dumps(key, ensure_ascii=style == "ascii").replace("/", "\\/")


@st.composite
def raw_json(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON text as a writer other than Python's might produce it: any whitespace, escaped keys,
    repeated keys, numbers in every notation, strings with and without `\\u` escapes."""
    kind = draw(
        st.sampled_from(
            ["str", "num", "lit", "list", "dict"] if depth < 3 else ["str", "num", "lit"]
        )
    )
    if kind == "str":
        text = draw(PIECE | st.builds(lambda s, n: s * n, PIECE, st.integers(1, 200)))
        return json.dumps(text, ensure_ascii=draw(st.booleans()))
    if kind == "num":
        return draw(NUMBER_TEXT)
    if kind == "lit":
        return draw(st.sampled_from(["true", "false", "null"]))
    items = draw(st.lists(raw_json(depth + 1), max_size=4))
    if kind == "list":
        body = ",".join(draw(SPACE) + item + draw(SPACE) for item in items)
        return "[" + body + draw(SPACE) + "]"
    keys = [
        _escaped_key(draw(st.sampled_from(["a", "b", "path", "é", "😀", "a/b", 'q"'])), draw)
        for _ in items
    ]
    body = ",".join(
        draw(SPACE) + key + draw(SPACE) + ":" + draw(SPACE) + item + draw(SPACE)
        for key, item in zip(keys, items, strict=True)
    )
    return "{" + body + draw(SPACE) + "}"


@SETTINGS
@given(raw_json(), st.integers(0, 600))
def test_parameter_json_from_any_json_text_matches_python(raw, limit):
    """`state.input` as written by any JSON writer: both engines, from bytes and from the dicts
    `json.loads` makes of it, write `json.dumps(json.loads(raw))`, cut at the preview limit."""
    data = (
        '[{"info": {}, "parts": [{"type": "tool", "state": {"status": "running", "input": '
        + raw
        + "}}]}]"
    ).encode()
    expected = json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
    if len(expected) > limit:
        expected = expected[:limit] + "..."
    cfg = ForkConfig(params_tier1=limit)
    for engine in ("rust", "python"):
        for form in (data, json.loads(data)):
            assert run(form, cfg, engine).context == (
                "<inherited_context>\nUnknown:\n[Tool: unknown] "
                + expected
                + "\n</inherited_context>"
            )


@st.composite
def session_with_compactions(draw: st.DrawFn) -> list[dict]:
    """Random messages with complete and incomplete compaction boundaries spliced in."""
    msgs = draw(st.lists(message(), max_size=10))
    for k in range(draw(st.integers(1, 3))):
        ids = [m["info"].get("id") for m in msgs if isinstance(m["info"].get("id"), str)]
        tail = draw(st.sampled_from([None, "msg_nowhere", *ids]))
        marker_id = f"cmp_{k}"
        part: dict[str, Any] = {"type": "compaction", "auto": False}
        if tail is not None:
            part["tail_start_id"] = tail
        marker = {"info": {"id": marker_id, "role": "user"}, "parts": [part]}
        at = draw(st.integers(0, len(msgs)))
        msgs.insert(at, marker)
        kind = draw(st.sampled_from(["by-parent", "fallback", "none", "before"]))
        if kind == "none":
            continue
        summary = {
            "info": {
                "id": f"sum_{k}",
                "role": "assistant",
                "summary": True,
                **({"parentID": marker_id} if kind in ("by-parent", "before") else {}),
            },
            "parts": [{"type": "text", "text": f"summary {k}"}],
        }
        if kind == "before":
            msgs.insert(draw(st.integers(0, at)), summary)
        else:
            msgs.insert(draw(st.integers(at + 1, len(msgs))), summary)
    return msgs


@SETTINGS
@given(session_with_compactions(), config())
def test_engines_agree_on_compacted_sessions(msgs, cfg):
    rust = run(msgs, cfg, "rust")
    assert rust == run(msgs, cfg, "python")
    assert run(json.dumps(msgs).encode(), cfg, "rust") == rust
    check_invariants(rust, msgs, cfg)
    turns = cfg is not None and cfg.fork_turns is not None and "user turns kept" in rust.preamble
    if rust.stats.compaction_detected and rust.stats.removed_messages == 0 and not turns:
        # the summary (an assistant message) comes first, unless fork_turns cut it off
        assert rust.context.startswith("<inherited_context>\nAgent:")


# --- lone surrogates in walked objects ---------------------------------------------------------
# A long text's lone surrogate is refused only where the context writes it (the messages it
# shows, a result as its tier cut it); short strings and parameters are checked in every
# message. The Rust engine probes the bodies of the shown messages as its writer would write
# them, the reference checks the texts it wrote: the same first fault must come out, or the
# same context. With compactions, small budgets and long outputs that tiers cut, many poisoned
# messages and many poisoned middles of outputs are never written.

SURROGATE = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
LONG_WIDE = st.builds(
    lambda first, c, n: first + c * n,
    # what a search may stop at, first
    st.sampled_from(["", "error: ", "[Old tool result content cleared]"]),
    st.sampled_from(["漢", "😀", "é", "Ā", "e\u0301", "a漢"]),
    st.integers(30_000, 70_000),
)


def _slots(value: Any, found: list[tuple[Any, Any]]) -> None:
    """Every (container, key) below `value`, in walk order."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        found.append((value, key))
        if isinstance(item, dict | list):
            _slots(item, found)


@st.composite
def poisoned_session(draw: st.DrawFn) -> list[dict]:
    # a copy: the strategies share some of the objects they give (`st.just`, `sampled_from`)
    plain = st.lists(message() | legacy_message(), min_size=1, max_size=8)
    msgs = copy.deepcopy(draw(plain | session_with_compactions()))
    every: list[tuple[Any, Any]] = []
    _slots(msgs, every)
    slots = [(container, key) for container, key in every if isinstance(container[key], str)]
    # mostly the long strings a render searches (results) or writes (texts)
    texts = [slot for slot in slots if slot[1] in ("text", "output", "error")]
    results = [slot for slot in texts if slot[1] != "text" or "type" not in slot[0]]
    results += [slot for slot in texts if slot[0].get("type") == "tool_result"]
    if slots:
        # some made long and wide, so the searches cross blocks
        for container, key in draw(st.lists(st.sampled_from(texts or slots), max_size=2)):
            container[key] = draw(LONG_WIDE) + container[key]
        where = st.sampled_from(results or texts or slots) | st.sampled_from(texts or slots)
        for container, key in draw(st.lists(where | st.sampled_from(slots), max_size=3)):
            text = container[key]
            cut = draw(st.integers(0, len(text)))
            container[key] = text[:cut] + draw(SURROGATE) + text[cut:]
    return msgs


def outcome(msgs: list, cfg: ForkConfig | None, engine: str) -> Any:
    try:
        return run(msgs, cfg, engine)
    except ForkInputError as err:
        return (err.path, err.detail)


@settings(SETTINGS, max_examples=120)
@given(poisoned_session(), config(), st.booleans())
def test_engines_agree_on_lone_surrogates_in_walked_objects(msgs, cfg, wide_needles):
    if wide_needles:
        cfg = (cfg or ForkConfig()).model_copy(update={"error_patterns": ("漢", "error")})
    assert outcome(msgs, cfg, "rust") == outcome(msgs, cfg, "python")


# --- junk anywhere in walked objects --------------------------------------------------------
# A caller's objects can hold anything anywhere: both engines must give the same context or
# the same first fault (never another exception), and a subclass must read as its base type.


class _Weird:
    """Not JSON at all."""


class _SubDict(dict):
    pass


class _SubList(list):
    pass


class _SubStr(str):
    pass


JUNK = st.one_of(
    JSON_SCALAR,
    st.sampled_from([float("nan"), float("inf"), 10**40, b"bytes", (1, "t"), _Weird(), {1: 2}]),
    st.sampled_from(["text", "tool", "tool_result", "compaction", "step-start"]).map(
        lambda kind: {"type": kind}
    ),
    TEXT.map(_SubStr),
    st.builds(lambda: _SubDict(type="text", text="sub")),
    st.builds(lambda: _SubList([{"type": "text", "text": "x"}])),
    st.integers(1, 80).map(lambda depth: _nested(depth)),
)


def _nested(depth: int) -> list[Any]:
    """A list nested `depth` levels."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def junk_session(draw: st.DrawFn) -> list[Any]:
    plain = st.lists(message() | legacy_message(), min_size=1, max_size=8)
    msgs: list[Any] = copy.deepcopy(draw(plain | session_with_compactions()))
    for _ in range(draw(st.integers(1, 3))):
        slots: list[tuple[Any, Any]] = []
        _slots(msgs, slots)
        container, key = draw(st.sampled_from(slots))
        if isinstance(container, dict) and draw(st.booleans()):
            del container[key]
        else:
            container[key] = draw(JUNK)
    return msgs


@settings(SETTINGS, max_examples=150)
@given(junk_session(), config())
def test_engines_agree_on_junk_anywhere_in_walked_objects(msgs, cfg):
    assert outcome(msgs, cfg, "rust") == outcome(msgs, cfg, "python")
