"""Ids in the texts an agent reads, as Markdown code: OpenCode renders the model's replies as
Markdown, where two ids on one line (``tsk_01a2…`` … ``tsk_01b3…``) would lose their
underscores and turn the text between them to italics. Every task id (and session id) in an
agent-visible text goes through `code`; a task with its marks through `code_label`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import Task

_BACKTICKS = re.compile(r"`+")


def code(text: str) -> str:
    """`text` as inline code: in backticks, more of them than any run inside it (with a space
    inside each end when it starts or ends with one), so any text stays whole."""
    runs = _BACKTICKS.findall(text)
    fence = "`" * (max((len(run) for run in runs), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_label(task: Task) -> str:
    """The task's id as code, then its marks: ``(forked)`` and ``(resumed)``."""
    return code(task.id) + task.label[len(task.id) :]
