"""asyncagents: background sub-agent tasks, and forked parent context cut down to fit.

The fork pipeline (``build_fork_context``) runs in a Rust core by default and in a pure-Python
reference with ``engine="python"``; both give the same answer.
"""

from .config import ForkConfig
from .errors import ForkInputError
from .fork import ForkContext, build_fork_context
from .models import Message
from .stats import ForkStats, TierDistribution

__all__ = [
    "ForkConfig",
    "ForkContext",
    "ForkInputError",
    "ForkStats",
    "Message",
    "TierDistribution",
    "build_fork_context",
]
__version__ = "0.1.0"
