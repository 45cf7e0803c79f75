"""The pure-Python reference pipeline: the readable specification and the benchmark baseline.

No Rust is involved here. `asyncagents.fork` runs this for ``engine="python"``; the Rust engine
must return the same text and stats for every input.
"""

from .pipeline import run_reference

__all__ = ["run_reference"]
