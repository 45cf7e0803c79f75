"""What the task core knows of the agent-facing tools: their names (a child gets them switched
off, unless it may start tasks of its own) and how long a blocking output call waits by default.

Kept below both the manager and the tools module (`tools`, `tool_args`), so that the core never
imports the adapter that calls it.
"""

from __future__ import annotations

TASK = "asyncagents_task"
OUTPUT = "asyncagents_output"
LIST = "asyncagents_list"
CANCEL = "asyncagents_cancel"
CLEAR = "asyncagents_clear"
TOOL_NAMES: tuple[str, ...] = (TASK, OUTPUT, LIST, CANCEL, CLEAR)

#: the one default wait of asyncagents_output(block=true), in code and in its description
DEFAULT_OUTPUT_TIMEOUT_SECONDS = 120.0


def disabled_tools() -> dict[str, bool]:
    """The ``tools`` body field that keeps a child from spawning tasks of its own."""
    return dict.fromkeys(TOOL_NAMES, False)
