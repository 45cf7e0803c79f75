"""The one exception bad fork input raises, from either engine."""

from __future__ import annotations


class ForkInputError(ValueError):
    """Malformed session input: `path` says where (``messages[3].parts[1].state``), `detail` what.

    Raised by both engines for the same inputs, with the same path and detail, so callers can
    report it to a user or an agent as it is. The Rust extension raises this very class.
    """

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail

    def __reduce__(self) -> tuple[type[ForkInputError], tuple[str, str]]:
        return (type(self), (self.path, self.detail))
