"""Which ``Host`` the service answers to, and whether an address is loopback.

A web page can make a browser send requests to the service through a name of its own that it
points at 127.0.0.1 (DNS rebinding); the browser then sends that name in ``Host``. So
``asyncagents serve`` answers only requests whose ``Host`` is one of its own names (421
otherwise), even on the routes that need no token:

- the address it is bound to, and ``localhost`` when that address is loopback (a bind to
  ``localhost`` allows ``127.0.0.1`` and ``[::1]`` too);
- when bound to every address (``0.0.0.0`` or ``::``): any literal IP address (a rebinding page
  always uses a name, never an IP) and ``localhost``;
- the names given with ``--allowed-host`` (e.g. the name of a reverse proxy in front of it);

each with and without the port (a name given with a port only with it). Names compare without
case and without a trailing dot.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

LOCALHOST = "localhost"


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address (an IPv6 one possibly in brackets), or None."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding to `host` keeps the service on this machine: a loopback address
    (``127.0.0.0/8``, ``::1``, IPv4-mapped ones too) or ``localhost``; any other name is not
    (it may resolve to anything)."""
    name = host.strip().rstrip(".").lower()
    if name == LOCALHOST:
        return True
    address = _ip(name)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and address.is_loopback


def _name(host: str) -> str:
    """`host` as it appears in a ``Host`` header: lower case, IPv6 in brackets, no final dot."""
    name = host.strip().rstrip(".").lower()
    address = _ip(name)
    if isinstance(address, ipaddress.IPv6Address):
        return f"[{address.compressed}]"
    return str(address) if address is not None else name


def _split(value: str) -> tuple[str, str | None]:
    """A ``Host`` value's name and port (None when it has none)."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1 :]
        if not rest:
            return value, None
        if not rest.startswith(":"):
            return value, None  # garbage after the address: matches no name
        return value[: end + 1], rest[1:]
    if value.count(":") == 1:
        name, port = value.split(":")
        return name, port
    return value, None


class AllowedHosts:
    """The ``Host`` values a service bound to `bind_host`:`port` answers to (module docstring)."""

    def __init__(self, bind_host: str, port: int, extra: Iterable[str] = ()) -> None:
        self.port = port
        bound = _ip(bind_host)
        #: any literal IP address is fine (bound to every address)
        self.any_ip = bound is not None and bound.is_unspecified
        names = {_name(bind_host)}
        if is_loopback(bind_host) or self.any_ip:
            names.add(LOCALHOST)
        if _name(bind_host) == LOCALHOST:
            names.update(("127.0.0.1", "[::1]"))
        #: names allowed with or without the port
        self.names = frozenset(names)
        #: exact ``name:port`` values (given with their port)
        self.exact: set[str] = set()
        extra_names: set[str] = set()
        for item in extra:
            name, given_port = _split(item)
            if given_port is None:
                extra_names.add(_name(name))
            else:
                self.exact.add(f"{_name(name)}:{given_port}")
        self.names |= extra_names

    def allows(self, host: str) -> bool:
        """Whether a request with this ``Host`` value is for this service."""
        name, port = _split(host)
        name = _name(name)
        if port is not None and f"{name}:{port}" in self.exact:
            return True
        if port is not None and port != str(self.port):
            return False
        if name in self.names:
            return True
        return self.any_ip and _ip(name) is not None

    def describe(self) -> str:
        """The allowed names, for a message."""
        shown = sorted(self.names | self.exact)
        if self.any_ip:
            shown.append("any IP address")
        return ", ".join(shown)


class HostCheck:
    """ASGI middleware: 421 for a request whose ``Host`` is not one of `allowed`."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = None
        for name, value in scope.get("headers") or ():
            if name == b"host":
                host = value.decode("latin-1")
                break
        if host is None or not self.allowed.allows(host):
            given = "no Host header" if host is None else f"Host {host!r}"
            response = error_response(
                421,
                "misdirected_request",
                f"This service does not answer to {given}; it answers to "
                f"{self.allowed.describe()} (start asyncagents serve with --allowed-host NAME "
                "to add a name).",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
