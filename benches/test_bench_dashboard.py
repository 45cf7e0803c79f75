"""Dashboard benchmarks:

- events per second to 100 subscribers: N task events published to the event hub, timed until
  every subscriber has read all of them, (a) from the hub's SSE byte stream in-process (the
  hub's own fan-out cost) and (b) over HTTP from uvicorn on 127.0.0.1 to 100 httpx streaming
  clients (what 100 open dashboards cost the service);
- the page's time to first render with 1,000 tasks: Debian's headless Chromium (Playwright)
  loads ``/``, connects to the event stream and draws every row; timed in the page from the
  navigation's start (``performance.now()``) to the 1,000th row in the DOM.

``ASYNCAGENTS_BENCH_SMOKE=1`` uses 1,000 events, 10 subscribers and 100 tasks.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from asyncagents.service.api import DashboardApi
from asyncagents.service.event_stream import EventHub
from asyncagents.tasks import InMemoryTaskStore, InProcessBackend, InProcessTurn, Task, TaskManager
from starlette.applications import Starlette

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dashboard"))
from dash_support import (
    CHROMIUM_ARGS,
    TOKEN,
    FakeChange,
    LiveService,
    ensure_chromium,
    make_task,
)

SMOKE = os.environ.get("ASYNCAGENTS_BENCH_SMOKE") == "1"
EVENTS = 1_000 if SMOKE else 10_000
SUBSCRIBERS = 10 if SMOKE else 100
PAGE_TASKS = 100 if SMOKE else 1_000
ROUNDS = 2 if SMOKE else 5


async def _instant(turn: InProcessTurn) -> str:
    return "done"


def _fan_out(hub: EventHub, events: int) -> None:
    task = make_task(1)
    for _ in range(events):
        hub.on_change(FakeChange("task.updated", task))


def test_events_per_second_hub(benchmark: Any) -> None:
    """The hub's SSE bytes to `SUBSCRIBERS` in-process readers."""
    benchmark.group = "dashboard-events"
    benchmark.extra_info.update(events=EVENTS, subscribers=SUBSCRIBERS, transport="in-process")

    async def one_round() -> float:
        hub = EventHub(buffer_size=EVENTS + 10, max_subscribers=SUBSCRIBERS)

        async def reader() -> int:
            got = 0
            sub = hub.subscribe(str(hub.last_id))
            async for chunk in hub.stream(sub, _no_snapshot):
                if chunk.startswith(b"id: "):
                    got += 1
                    if got == EVENTS:
                        return got
            return got

        readers = [asyncio.ensure_future(reader()) for _ in range(SUBSCRIBERS)]
        await asyncio.sleep(0.01)
        begin = time.perf_counter()
        _fan_out(hub, EVENTS)
        counts = await asyncio.wait_for(asyncio.gather(*readers), 600)
        elapsed = time.perf_counter() - begin
        assert counts == [EVENTS] * SUBSCRIBERS
        return elapsed

    timings: list[float] = []

    def run() -> None:
        timings.append(asyncio.run(one_round()))

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["events_per_second_to_all"] = round(EVENTS / min(timings))


async def _no_snapshot() -> list[Task]:
    return []


class _HubServer:
    """The dashboard routes on uvicorn (127.0.0.1) in a thread; `hub` publishes there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),))

    async def _serve(self) -> None:
        backend = InProcessBackend(_instant)
        manager = TaskManager(backend, InMemoryTaskStore())
        self.hub = EventHub(buffer_size=EVENTS + 10, max_subscribers=SUBSCRIBERS + 1)
        self.api = DashboardApi(manager, token=TOKEN, hub=self.hub)
        config = uvicorn.Config(
            Starlette(routes=self.api.routes), host="127.0.0.1", port=0, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        serving = asyncio.ensure_future(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.ready.set()
        await serving

    def __enter__(self) -> _HubServer:
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        def shut() -> None:
            self.api.close()
            self.server.should_exit = True

        self.loop.call_soon_threadsafe(shut)
        self.thread.join(30)


def test_events_per_second_http(benchmark: Any) -> None:
    """`SUBSCRIBERS` HTTP clients reading ``/v1/events`` from uvicorn."""
    benchmark.group = "dashboard-events"
    benchmark.extra_info.update(events=EVENTS, subscribers=SUBSCRIBERS, transport="http")
    timings: list[float] = []
    with _HubServer() as server:
        url = f"http://127.0.0.1:{server.port}/v1/events"

        async def one_round() -> float:
            ready = asyncio.Semaphore(0)
            start_id = str(server.hub.last_id)

            async def reader(http: httpx.AsyncClient) -> int:
                got = 0
                headers = {"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": start_id}
                async with http.stream("GET", url, headers=headers) as response:
                    assert response.status_code == 200
                    ready.release()
                    async for line in response.aiter_lines():
                        if line.startswith("id: "):
                            got += 1
                            if got == EVENTS:
                                return got
                return got

            limits = httpx.Limits(max_connections=SUBSCRIBERS + 5)
            timeout = httpx.Timeout(600, connect=30)
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
                readers = [asyncio.ensure_future(reader(http)) for _ in range(SUBSCRIBERS)]
                for _ in range(SUBSCRIBERS):
                    await asyncio.wait_for(ready.acquire(), 60)
                await asyncio.sleep(0.2)  # every stream is subscribed on the server side
                begin = time.perf_counter()
                asyncio.run_coroutine_threadsafe(_publish(server.hub), server.loop).result(60)
                counts = await asyncio.wait_for(asyncio.gather(*readers), 600)
                elapsed = time.perf_counter() - begin
            assert counts == [EVENTS] * SUBSCRIBERS
            return elapsed

        def run() -> None:
            timings.append(asyncio.run(one_round()))

        benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["events_per_second_to_all"] = round(EVENTS / min(timings))


async def _publish(hub: EventHub) -> None:
    _fan_out(hub, EVENTS)


@pytest.fixture(scope="module")
def page_service() -> Iterator[LiveService]:
    service = LiveService().start()

    async def fill() -> None:
        store = service.manager.store
        statuses = ["running", "completed", "error", "cancelled", "completed"]
        for n in range(PAGE_TASKS):
            task = make_task(
                n,
                parent_session_id=f"ses_parent{n % 10}",
                status=statuses[n % len(statuses)],
                description=f"Benchmark task number {n}",
                backend=service.manager.backend_name,
            )
            await store.insert(task)

    service.call(fill())
    yield service
    service.stop()


def test_page_first_render_1000_tasks(benchmark: Any, page_service: LiveService) -> None:
    """From navigation start to every task's row drawn, in Chromium."""
    from playwright.sync_api import sync_playwright

    benchmark.group = "dashboard-page"
    benchmark.extra_info.update(tasks=PAGE_TASKS)
    executable = ensure_chromium()
    in_page: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        # bypass_csp: the polled predicate is evaluated as a string (the page itself is unchanged)
        context = browser.new_context(bypass_csp=True)
        context.add_init_script(f"sessionStorage.setItem('asyncagents.token', '{TOKEN}')")
        page = context.new_page()

        def load() -> None:
            page.goto(page_service.url + "/")
            page.wait_for_function(
                f"document.querySelectorAll('.row').length === {PAGE_TASKS}", timeout=120_000
            )
            in_page.append(page.evaluate("performance.now()"))

        benchmark.pedantic(load, rounds=ROUNDS, iterations=1, warmup_rounds=1)
        browser.close()
    benchmark.extra_info["first_render_ms_in_page_min"] = round(min(in_page), 1)
    benchmark.extra_info["first_render_ms_in_page_median"] = round(
        sorted(in_page)[len(in_page) // 2], 1
    )
