"""The package's dependency ranges and the two constraints files that CI tests them with."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]


def _pins(name: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (REPO / "constraints" / name).read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[requirement.name.lower()] = Version(spec.version)
    return pins


def _requirements(*groups: str) -> list[Requirement]:
    found: list[Requirement] = []
    for group in groups:
        lines = (
            PROJECT["dependencies"]
            if group == "runtime"
            else PROJECT["optional-dependencies"][group]
        )
        found += [Requirement(r) for r in lines if not r.startswith("asyncagents")]
    return found


def _lower(requirement: Requirement) -> Version:
    (low,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return low


def test_runtime_dependencies_are_ranges_with_both_ends() -> None:
    for requirement in _requirements("runtime", "postgres"):
        operators = sorted(s.operator for s in requirement.specifier)
        assert operators == ["<", ">="], f"{requirement} is not a compatible range"


def test_the_lowest_constraints_are_the_lower_bounds() -> None:
    lowest = _pins("lowest.txt")
    bounds = {r.name.lower(): _lower(r) for r in _requirements("runtime", "postgres")}
    for name, low in bounds.items():
        assert lowest.get(name) == low, f"constraints/lowest.txt: {name}=={low}"
    # psycopg's binary part follows psycopg itself
    assert lowest["psycopg-binary"] == lowest["psycopg"]
    assert set(lowest) == {*bounds, "psycopg-binary"}


def test_dev_constraints_pin_every_tool_and_dependency_inside_its_range() -> None:
    pins = _pins("dev.txt")
    for requirement in _requirements("runtime", "postgres", "test", "docs", "dev"):
        name = requirement.name.lower()
        assert name in pins, f"constraints/dev.txt has no pin for {name}"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} {requirement}"
    build = [
        Requirement(r)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["build-system"][
            "requires"
        ]
    ]
    for requirement in build:
        assert requirement.specifier.contains(pins[requirement.name.lower()])
