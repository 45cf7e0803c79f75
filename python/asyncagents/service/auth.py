"""The service's bearer token: created once in a private file, checked on every request.

The token file lives under the user's state directory, so `asyncagents serve` and the OpenCode
plugin (which reads the file at call time) agree on it with no step in between when both run as
the same user; nobody else can read it (mode 0600 in a 0700 directory).
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Collection
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from ..locations import default_token_path
from .errors import ApiError

#: the detail of every 401
UNAUTHORIZED = (
    "Send the service token as `Authorization: Bearer <token>`; it is in the token file that "
    "`asyncagents serve` printed at start."
)

#: bytes of randomness in a new token (hex encoded: twice as many characters)
TOKEN_BYTES = 32


class TokenFileError(Exception):
    """The token file cannot be created or read, or others can read it; names the file."""


def _read(path: Path) -> str:
    try:
        info = path.stat()
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(
                f"{path} is readable by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"run `chmod 600 {path}` or delete it to get a new token"
            )
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc}") from exc
    if len(token) < 16:
        raise TokenFileError(f"the token file {path} holds no token; delete it to get a new one")
    return token


def load_or_create_token(path: Path | None = None) -> tuple[str, bool]:
    """The token in `path` (default `default_token_path()`), created there when missing.

    Returns ``(token, created)``. Creation is atomic and exclusive (``O_EXCL``): two services
    starting at once end up with the same token.
    """
    path = path or default_token_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path), False
    except OSError as exc:
        raise TokenFileError(f"cannot create the token file {path}: {exc}") from exc
    token = secrets.token_hex(TOKEN_BYTES)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise TokenFileError(f"cannot write the token file {path}: {exc}") from exc
    return token, True


def token_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries `token` as a bearer (constant time)."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


def require_token(header: str | None, token: str) -> None:
    """The one auth check: a 401 `ApiError` unless `header` carries `token` as a bearer."""
    if not token_matches(header, token):
        raise ApiError(401, "unauthorized", UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})


class BearerAuth:
    """ASGI middleware: HTTP requests need ``Authorization: Bearer <token>``, except
    `public_paths` (exact paths) and paths under `public_prefixes`."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        public_paths: Collection[str] = (),
        public_prefixes: Collection[str] = (),
    ) -> None:
        self.app = app
        self.token = token
        self.public_paths = frozenset(public_paths)
        self.public_prefixes = tuple(public_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path in self.public_paths or path.startswith(self.public_prefixes):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        try:
            require_token(header, self.token)
        except ApiError as exc:
            await exc.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)
