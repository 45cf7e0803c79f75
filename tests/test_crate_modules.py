"""The Rust crate's modules depend on each other in one direction only (issue 8: "no module
cycle"). Every path a module names (`crate::…`, `super::…`, `self::…`, a child module by its
bare name, and each name of a `{…}` group after one) is an edge to the module it lands in, a
parent and its children included; the graph of those edges has no cycle."""

from __future__ import annotations

import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "rust" / "src"

Module = tuple[str, ...]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
#: a path (`a::b::c`), or a path and the names of the `{…}` group after it (one level deep)
_PATH = re.compile(
    rf"(?<![\w:])(?:({_IDENT}(?:::{_IDENT})*)::\{{([^{{}}]*)\}}|({_IDENT}(?:::{_IDENT})+))"
)
#: what moves the scope: an inline module's opening, or a brace
_SCOPE_TOKEN = re.compile(rf"\bmod\s+({_IDENT})\s*\{{|[{{}}]")
_COMMENT = re.compile(r"//[^\n]*")


def modules() -> dict[Module, Path]:
    """Each file module of the crate (`()` is `lib.rs`) and its file."""
    found = {}
    for path in sorted(SOURCE.rglob("*.rs")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        found[parts[:-1] if parts[-1] in ("lib", "mod") else parts] = path
    return found


def _scopes(text: str, file_module: Module) -> list[tuple[int, Module]]:
    """(offset, the module the code from there on is in), following inline `mod x { … }`."""
    scopes = [(0, file_module)]
    closing: list[tuple[int, Module]] = []  # the brace depth an inline module ends at
    depth, current = 0, file_module
    for token in _SCOPE_TOKEN.finditer(text):
        if token.group(1):  # `mod x {`
            closing.append((depth, current))
            current = (*current, token.group(1))
            scopes.append((token.end(), current))
            depth += 1
        elif token.group() == "{":
            depth += 1
        else:
            depth -= 1
            if closing and closing[-1][0] == depth:
                current = closing.pop()[1]
                scopes.append((token.end(), current))
    return scopes


def _file_module(module: Module, known: set[Module]) -> Module:
    """The file module that an inline module (`mod tests { … }`) is written in."""
    while module not in known:
        module = module[:-1]
    return module


def _landing(segments: list[str], scope: Module, known: set[Module]) -> Module | None:
    """The deepest module a path names from `scope`, or None (another crate, a local name)."""
    head, rest = segments[0], segments[1:]
    if head == "crate":
        base: Module = ()
    elif head == "self":
        base = scope
    elif head == "super":
        base = scope[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    elif (*scope, head) in known:  # a child module by its bare name
        base = (*scope, head)
    else:
        return None
    for segment in rest:
        if (*base, segment) not in known:
            break
        base = (*base, segment)
    return base


def dependencies() -> dict[Module, set[Module]]:
    """Each file module and the file modules it names (not itself)."""
    files = modules()
    known = set(files)
    graph: dict[Module, set[Module]] = {module: set() for module in known}
    for module, file in files.items():
        text = _COMMENT.sub("", file.read_text())
        scopes = _scopes(text, module)
        for match in _PATH.finditer(text):
            scope = next(s for start, s in reversed(scopes) if start <= match.start())
            prefix = (match.group(1) or match.group(3)).split("::")
            group = match.group(2) or ""
            # `use a::{self as x, b::c, d}`: a, a::b, a::d; a path without a group: itself
            names = [item.split()[0].split("::")[0] for item in group.split(",") if item.strip()]
            for path in [prefix + ([] if name == "self" else [name]) for name in names] or [prefix]:
                landed = _landing(path, scope, known)
                if landed is None:
                    continue
                source, target = _file_module(scope, known), _file_module(landed, known)
                if target != source:
                    graph[source].add(target)
    return graph


def test_the_crate_has_no_module_cycle():
    graph = dependencies()
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        # the sorter reads each set as the node's predecessors: its cycle runs against the uses
        names = ["::".join(module) or "crate" for module in reversed(cycle.args[1])]
        raise AssertionError(f"module cycle: {' -> '.join(names)}") from None
    assert len(order) == len(graph)


def test_the_graph_sees_the_crates_uses():
    graph = dependencies()
    assert ("pipeline",) in graph[()]  # lib.rs names `pipeline::…`
    assert ("input",) in graph[("input", "borrowed")]  # `use super::{…, read_messages, …}`
    assert ("input", "dict") in graph[("input", "borrowed")]  # the same group's `dict`
    # `use super::literal;`, and `super::unescape::…` in a function body
    assert graph[("json", "dump")] == {("json", "literal"), ("json", "unescape")}
    assert ("input", "borrowed") not in graph[("input",)]  # the rule set does not use it
    assert () not in graph[("config",)]  # `use super::Config` of its inline tests


def test_a_cycle_would_be_found(tmp_path, monkeypatch):
    for name, code in {
        "lib.rs": "mod a;\nmod b;\nmod c;\n",
        "a.rs": "use crate::b::{f, self as bee};\npub fn g() {}\n",
        "b.rs": "pub fn f() { super::c::h() }\n#[cfg(test)]\nmod tests { use super::*; }\n",
        "c.rs": "pub fn h() { crate::a::g() }\n",
    }.items():
        (tmp_path / name).write_text(code)
    monkeypatch.setattr(f"{__name__}.SOURCE", tmp_path)
    assert dependencies() == {(): set(), ("a",): {("b",)}, ("b",): {("c",)}, ("c",): {("a",)}}
    try:
        test_the_crate_has_no_module_cycle()
    except AssertionError as found:
        # in the direction of the uses, from whichever module the sorter met first
        assert str(found) in (
            "module cycle: a -> b -> c -> a",
            "module cycle: b -> c -> a -> b",
            "module cycle: c -> a -> b -> c",
        )
    else:
        raise AssertionError("the cycle a -> b -> c -> a was not found")
