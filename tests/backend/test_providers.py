"""``GET /config/providers`` and ``GET /config``: bounded like every backend call, and the
catalog built from them."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from asyncagents.tasks import (
    BackendProtocolError,
    BackendResponseTooLargeError,
    BackendTimeoutError,
    OpenCodeBackend,
)
from asyncagents.tasks.catalog import ModelCatalog, ModelInfo

PROVIDERS = {
    "providers": [
        {
            "id": "fake",
            "models": {
                "fake-model": {"id": "fake-model", "limit": {"context": 200000, "output": 8192}},
                "fake-small": {"id": "fake-small", "limit": {"context": 16000, "output": 4096}},
            },
        }
    ],
    "default": {"fake": "fake-model"},
}


def _backend(handler: httpx.MockTransport, **kw: float) -> OpenCodeBackend:
    client = httpx.AsyncClient(base_url="http://opencode.test", transport=handler)
    return OpenCodeBackend("http://opencode.test", client=client, **kw)  # type: ignore[arg-type]


async def test_the_catalog_reads_both_and_caches_them() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/config/providers":
            return httpx.Response(200, json=PROVIDERS)
        return httpx.Response(200, json={"model": "fake/fake-model", "provider": {}})

    backend = _backend(httpx.MockTransport(answer))
    catalog = ModelCatalog(backend, allowed=None, ttl=60)
    assert await catalog.allowed() == ["fake/fake-model", "fake/fake-small"]
    assert await catalog.default() == "fake/fake-model"
    assert await catalog.check("fake/fake-small") == ModelInfo(
        name="fake/fake-small", context=16000, output=4096
    )
    assert seen == ["/config/providers", "/config"]  # read once for all three


async def test_a_slow_huge_or_wrong_answer_is_a_typed_error() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json=PROVIDERS)

    with pytest.raises(BackendTimeoutError):
        await _backend(httpx.MockTransport(slow), timeout=0.3).providers()
    huge = httpx.MockTransport(lambda r: httpx.Response(200, content=b"[" + b" " * 5000 + b"]"))
    with pytest.raises(BackendResponseTooLargeError):
        await _backend(huge, max_body_bytes=1000).providers()
    listed = httpx.MockTransport(lambda r: httpx.Response(200, json=[1, 2]))
    with pytest.raises(BackendProtocolError, match="JSON of type list, expected dict"):
        await _backend(listed).server_config()
