"""Imports run one way: service and tools -> manager -> backends and stores, never back; and the
fork pipeline imports none of them. Read from the source (every ``import`` statement, those
inside functions and under ``TYPE_CHECKING`` too), as the crate's module test reads the crate."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "asyncagents"

#: what an agent or a client talks to: they may import anything below them
ADAPTERS = (
    "asyncagents.tasks.tools",
    "asyncagents.tasks.tool_args",
    "asyncagents.service",
    "asyncagents.opencode",
    "asyncagents.cli",
    "asyncagents.__main__",
)
#: the bottom layer of the tasks: what holds sessions and rows, and the values they share
BACKENDS_AND_STORES = (
    "asyncagents.tasks.store",
    "asyncagents.tasks.backend",
    "asyncagents.tasks.opencode",
    "asyncagents.tasks.inprocess",
)
#: values every layer of the tasks may use (`locations` where state and the service live;
#: `admission` is the pure planner a store runs in its admission transaction; `tool_names` what
#: the core knows of the tools; `queries` what a reader asks of the stored tasks and the
#: answers, which the stores compute)
SHARED = (
    "asyncagents.locations",
    "asyncagents.tasks.admission",
    "asyncagents.tasks.queries",
    "asyncagents.tasks.tool_names",
    "asyncagents.tasks.models",
    "asyncagents.tasks.config",
    "asyncagents.tasks.errors",
    "asyncagents.tasks.markdown",
)


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: name -> (file, is a package's __init__)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(name: str, path: Path, package: bool, known: dict[str, object]) -> Iterator[str]:
    """The package's modules that `name` imports (``from x import y`` counts ``x.y`` when that
    is a module, else ``x``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("asyncagents"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("asyncagents"):
                continue
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            yield from subs or [target]


def edges() -> list[tuple[str, str]]:
    known = modules()
    return sorted(
        {
            (name, target)
            for name, (path, package) in known.items()
            for target in imports(name, path, package, known)
        }
    )


def layer(module: str) -> str:
    if under(module, ADAPTERS):
        return "adapter"
    if module == "asyncagents.tasks":
        return "face"  # the package's __init__: hands the public names on
    if under(module, SHARED):
        return "shared"
    if under(module, BACKENDS_AND_STORES):
        return "backend"
    if under(module, ("asyncagents.tasks",)):
        return "manager"
    return "fork"


#: which layers each layer may import
ALLOWED = {
    "adapter": {"adapter", "face", "manager", "shared", "backend", "fork"},
    "face": {"adapter", "manager", "shared", "backend", "fork"},
    "manager": {"manager", "shared", "backend", "fork"},
    "backend": {"backend", "shared", "fork"},
    "shared": {"shared", "fork"},
    "fork": {"fork"},
}


def test_imports_run_one_way() -> None:
    wrong = [
        f"{source} ({layer(source)}) imports {target} ({layer(target)})"
        for source, target in edges()
        if layer(target) not in ALLOWED[layer(source)]
    ]
    assert wrong == []


def test_the_rule_sees_a_wrong_way_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check finds an import that runs back up (a store importing the manager)."""
    package = tmp_path / "asyncagents"
    (package / "tasks" / "store").mkdir(parents=True)
    for init in (package, package / "tasks", package / "tasks" / "store"):
        (init / "__init__.py").write_text("")
    (package / "tasks" / "manager.py").write_text("X = 1\n")
    (package / "tasks" / "store" / "sqlite.py").write_text("from ..manager import X\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert ("asyncagents.tasks.store.sqlite", "asyncagents.tasks.manager") in edges()
    with pytest.raises(AssertionError):
        test_imports_run_one_way()
