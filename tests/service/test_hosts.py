"""The ``Host`` check of the service (DNS rebinding) and loopback detection by address."""

from __future__ import annotations

import httpx
import pytest
from asyncagents.service import create_app
from asyncagents.service.hosts import AllowedHosts, is_loopback
from asyncagents.tasks import TaskManager
from service_support import TOKEN


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "[::1]", "localhost", "LocalHost.",
     "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"],
)  # fmt: skip
def test_loopback_by_address(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "128.0.0.1", "example.com", "localhost.example",
     "my-laptop", "::2", "fe80::1"],
)  # fmt: skip
def test_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_loopback_bind_allows_its_address_and_localhost_with_or_without_its_port() -> None:
    allowed = AllowedHosts("127.0.0.1", 4097)
    for host in ("127.0.0.1", "127.0.0.1:4097", "localhost", "localhost:4097", "LOCALHOST.:4097"):
        assert allowed.allows(host), host
    for host in ("127.0.0.1:80", "localhost:4098", "evil.example", "evil.example:4097",
                 "[::1]:4097", "127.0.0.2:4097", "", ":4097", "127.0.0.1:4097:1"):  # fmt: skip
        assert not allowed.allows(host), host


def test_ipv6_and_localhost_binds() -> None:
    v6 = AllowedHosts("::1", 9000)
    assert v6.allows("[::1]:9000") and v6.allows("[::1]") and v6.allows("localhost:9000")
    assert not v6.allows("127.0.0.1:9000") and not v6.allows("[::2]:9000")
    assert not v6.allows("[::1]x") and not v6.allows("[::1]:x") and not v6.allows("[::1")
    named = AllowedHosts("localhost", 9000)
    for host in ("localhost:9000", "127.0.0.1:9000", "[::1]:9000"):
        assert named.allows(host), host
    assert not named.allows("evil.example:9000")


def test_a_public_bind_allows_only_its_address_and_wildcards_any_ip() -> None:
    public = AllowedHosts("192.168.1.5", 4097)
    assert public.allows("192.168.1.5:4097")
    assert not public.allows("localhost:4097") and not public.allows("10.0.0.1:4097")
    anywhere = AllowedHosts("0.0.0.0", 4097)
    for host in ("192.168.1.5:4097", "10.0.0.1", "[fe80::1]:4097", "localhost:4097"):
        assert anywhere.allows(host), host
    assert not anywhere.allows("rebind.example:4097")
    assert not anywhere.allows("10.0.0.1:80")


def test_allowed_host_option_adds_names() -> None:
    allowed = AllowedHosts("127.0.0.1", 4097, ["agents.internal", "Proxy.Example:8443"])
    for host in ("agents.internal", "agents.internal:4097", "proxy.example:8443"):
        assert allowed.allows(host), host
    for host in ("agents.internal:80", "proxy.example", "proxy.example:4097"):
        assert not allowed.allows(host), host
    assert allowed.describe() == "127.0.0.1, agents.internal, localhost, proxy.example:8443"


async def test_the_app_answers_421_for_another_host_on_every_route(
    manager: TaskManager, parent: str
) -> None:
    app = create_app(
        manager,
        token=TOKEN,
        manage_manager=False,
        allowed_hosts=AllowedHosts("127.0.0.1", 4097),
    )
    transport = httpx.ASGITransport(app=app)
    auth = {"authorization": f"Bearer {TOKEN}"}
    body = {"session_id": parent, "arguments": {}}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://rebind.example:4097"
    ) as http:
        for response in (
            await http.get("/"),
            await http.get("/v1/health"),
            await http.get("/static/dashboard.js"),
            await http.get("/v1/tasks", headers=auth),
            await http.post("/v1/tools/asyncagents_list", json=body, headers=auth),
        ):
            assert response.status_code == 421, response.url
            assert response.json() == {
                "error": "misdirected_request",
                "detail": "This service does not answer to Host 'rebind.example:4097'; it "
                "answers to 127.0.0.1, localhost (start asyncagents serve with "
                "--allowed-host NAME to add a name).",
            }
            assert response.headers["x-content-type-options"] == "nosniff"
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:4097") as http:
        assert (await http.get("/v1/health")).status_code == 200
        answer = await http.post("/v1/tools/asyncagents_list", json=body, headers=auth)
        assert answer.json() == {"text": "No background tasks found"}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:4097") as http:
        assert (await http.get("/")).status_code == 200
