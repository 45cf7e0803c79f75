"""The README and the docs site: every page in the site's navigation, links that resolve, and
nothing that reads as a work diary (issue numbers, "this stop")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def _nav() -> list[str]:
    config = (REPO / "mkdocs.yml").read_text("utf-8")
    nav = config[config.index("\nnav:") :]
    return re.findall(r":\s+([\w./-]+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_navigation_and_every_entry_exists() -> None:
    nav = _nav()
    assert sorted(nav) == PAGES


def test_relative_links_point_at_files_that_exist() -> None:
    for page in [REPO / "README.md", *(DOCS / p for p in PAGES)]:
        text = page.read_text("utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_no_issue_numbers_or_diary_words() -> None:
    diary = re.compile(r"\bissue\s*#?\d|\bthis stop\b|\bwork session\b|\bthis session\b", re.I)
    quoted = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # texts an agent sees, quoted exactly
    for page in [REPO / "README.md", *(DOCS / p for p in PAGES)]:
        found = diary.findall(quoted.sub("", page.read_text("utf-8")))
        assert not found, f"{page.name}: {found}"


def test_nothing_claims_a_package_index() -> None:
    for page in [
        REPO / "README.md",
        *(DOCS / p for p in PAGES),
        REPO / "python" / "asyncagents" / "opencode" / "plugin.js",
    ]:
        text = page.read_text("utf-8")
        assert "pypi.org" not in text, page
        assert "pip install asyncagents" not in text, page
