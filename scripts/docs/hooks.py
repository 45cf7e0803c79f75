"""MkDocs hooks: the home page from the README, and the settings table from the models.

- ``docs/index.md`` becomes the README (one text for both), its ``docs/...`` links made
  relative.
- The settings table of ``docs/configuration.md`` comes from
  `asyncagents.service.settings.settings_table`: the same fields that make ``asyncagents
  serve``'s options, so a field added to `TaskManagerConfig` shows in the docs too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README_MARKER = re.compile(r"<!-- readme:.*?-->")
TABLE_MARKER = "<!-- settings-table -->"
_REPO = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if README_MARKER.search(markdown):
        readme = (_REPO / "README.md").read_text(encoding="utf-8")
        readme = readme.replace("](docs/", "](")
        return readme
    if TABLE_MARKER in markdown:
        from asyncagents.service.settings import settings_table

        return markdown.replace(TABLE_MARKER, settings_table())
    return markdown
