"""The dashboard page in Debian's headless Chromium, driven by Playwright, against the service
running on 127.0.0.1 (uvicorn in a thread) over a real `TaskManager` (in-process backend)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from asyncagents.service.event_stream import event_task_json
from asyncagents.tasks import Task, TaskStatus
from dash_support import CHROMIUM_ARGS, TOKEN, LiveService, artifacts_dir, ensure_chromium
from playwright.sync_api import Browser, Page, expect, sync_playwright

TIMEOUT_MS = 20_000  # generous: the machine is shared
expect.set_options(timeout=TIMEOUT_MS)  # expect has its own default (5 s), not the page's


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = ensure_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def live() -> Iterator[LiveService]:
    service = LiveService().start()
    yield service
    service.stop()


def open_page(browser: Browser, live: LiveService, scheme: str = "light") -> Page:
    context = browser.new_context(
        color_scheme=scheme,  # type: ignore[arg-type]
        viewport={"width": 1280, "height": 760},
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(live.url + "/")
    return page


def log_in(page: Page, token: str = TOKEN) -> None:
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", token)
    page.press("#token", "Enter")
    if token == TOKEN:
        expect(page.locator("#login")).to_be_hidden()
        expect(page.locator("#main")).to_be_visible()


def row(page: Page, task: Task) -> Any:
    return page.locator(f'.row[data-id="{task.id}"]')


def launch(live: LiveService, prompt: str, desc: str, agent: str = "general", **kw: Any) -> Task:
    return live.call(live.manager.task(live.parent, prompt, agent, desc, **kw))


def status_of(live: LiveService, task: Task) -> TaskStatus:
    async def read() -> TaskStatus:
        got = await live.manager.store.get(task.id)
        assert got is not None
        return got.status

    return live.call(read())


def wait_status(live: LiveService, task: Task, status: TaskStatus, timeout: float = 15) -> None:
    end = time.monotonic() + timeout
    while status_of(live, task) is not status:
        assert time.monotonic() < end, f"{task.id} never became {status.value}"
        time.sleep(0.02)


def test_loads_shows_running_tasks_and_updates_live(browser: Browser, live: LiveService) -> None:
    first = launch(live, "Scan the repository [tool] [hold:first]", "Scan repo")
    page = open_page(browser, live)
    log_in(page)
    expect(page.locator("#conn")).to_have_text("Live")
    expect(row(page, first).locator(".badge")).to_have_text("running")
    expect(row(page, first)).to_contain_text("Scan repo")
    expect(page.locator(".parent")).to_contain_text(live.parent)
    # the token is kept for the tab: a reload goes straight to the tasks
    page.reload()
    expect(page.locator("#conn")).to_have_text("Live")
    assert page.evaluate("sessionStorage.getItem('asyncagents.token')") == TOKEN
    # a new task appears without a reload, then completes live
    second = launch(live, "Write the changelog [hold:second]", "Changelog", agent="build")
    expect(row(page, second).locator(".badge")).to_have_text("running")
    expect(row(page, second)).to_contain_text("build")
    before = row(page, second).locator(".dur").inner_text()
    page.wait_for_timeout(2200)
    assert row(page, second).locator(".dur").inner_text() != before  # the duration ticks
    live.run(lambda: live.script.release("first"))
    expect(row(page, first).locator(".badge")).to_have_text("completed")
    expect(row(page, first).locator(".tools")).to_have_text("2 tools · read")
    expect(page.locator("#counts")).to_contain_text("2 tasks")
    live.run(lambda: live.script.release("second"))
    expect(row(page, second).locator(".badge")).to_have_text("completed")


def test_filters_detail_keyboard_and_cancel(browser: Browser, live: LiveService) -> None:
    done = launch(live, "Summarise the design notes", "Design summary")
    failed = launch(live, "Deploy to staging [fail]", "Deploy staging", agent="build")
    held = launch(live, "Watch the logs [hold:never]", "Log watcher", agent="explore")
    wait_status(live, done, TaskStatus.COMPLETED)
    wait_status(live, failed, TaskStatus.ERROR)
    page = open_page(browser, live)
    log_in(page)
    expect(page.locator(".row")).to_have_count(3)
    # by status
    page.uncheck('#status-filter input[value="completed"]')
    expect(page.locator(".row")).to_have_count(2)
    expect(row(page, done)).to_have_count(0)
    page.check('#status-filter input[value="completed"]')
    # by text (description, prompt, agent)
    page.fill("#q", "staging")
    expect(page.locator(".row")).to_have_count(1)
    expect(row(page, failed)).to_be_visible()
    page.fill("#q", "EXPLORE")
    expect(page.locator(".row")).to_have_count(1)
    expect(row(page, held)).to_be_visible()
    page.fill("#q", "")
    expect(page.locator(".row")).to_have_count(3)
    # keyboard: focus a row, arrows move, Enter opens, Esc closes and gives the focus back
    row(page, held).focus()
    page.keyboard.press("ArrowDown")
    expect(row(page, failed)).to_be_focused()
    page.keyboard.press("Enter")
    dialog = page.locator("#detail")
    expect(dialog).to_be_visible()
    expect(page.locator("#detail-title")).to_have_text(failed.id)
    expect(page.locator("#detail-error")).to_have_text(
        "APIError: Invalid request: rejected by the provider"
    )
    expect(page.locator("#cancel")).to_be_hidden()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(row(page, failed)).to_be_focused()
    # a completed task: its result and its conversation
    row(page, done).click()
    expect(page.locator("#detail-result")).to_have_text("Done: Summarise the design notes")
    expect(page.locator("#detail-messages .msg")).to_have_count(2)
    expect(page.locator("#detail-messages")).to_contain_text("Summarise the design notes")
    page.click("#detail-close")
    # cancel the running one from its detail
    row(page, held).click()
    expect(page.locator("#detail-status")).to_have_text("running")
    page.click("#cancel")
    expect(page.locator("#cancel-msg")).to_have_text("Cancelled.")
    expect(page.locator("#detail-status")).to_have_text("cancelled")
    expect(page.locator("#detail-error")).to_have_text("cancelled by the parent")
    page.keyboard.press("Escape")
    expect(row(page, held).locator(".badge")).to_have_text("cancelled")
    wait_status(live, held, TaskStatus.CANCELLED)


def test_wrong_token_and_service_down(browser: Browser, live: LiveService) -> None:
    page = open_page(browser, live)
    log_in(page, "not-the-token")
    expect(page.locator("#login-error")).to_have_text("The service refused this token.")
    log_in(page)
    expect(page.locator("#conn")).to_have_text("Live")
    live.stop()
    expect(page.locator("#conn")).to_have_text("Service unreachable")
    expect(page.locator("#down")).to_contain_text("The service is unreachable")
    expect(page.locator("#tree")).to_have_class("tree stale")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshot_with_every_status(browser: Browser, live: LiveService, scheme: str) -> None:
    parent_history = [("user", "Plan the release of v2"), ("assistant", "Here is the plan...")]
    for role, text in parent_history:
        live.run(lambda role=role, text=text: live.backend.add_message(live.parent, role, text))
    done = launch(live, "Summarise the open issues [tool]", "Triage issues")
    resumed = launch(live, "Draft the release notes", "Release notes", agent="build")
    failed = launch(live, "Publish to the registry [fail]", "Publish package", agent="build")
    cancelled = launch(live, "Benchmark the parser [hold:never]", "Parser benchmark")
    forked = launch(
        live, "Review the plan [tool] [hold:fork]", "Review plan", agent="explore", fork=True
    )
    wait_status(live, done, TaskStatus.COMPLETED)
    wait_status(live, resumed, TaskStatus.COMPLETED)
    live.call(
        live.manager.task(
            live.parent, "Add the migration notes [hold:resume]", "", "", resume=resumed.id
        )
    )
    wait_status(live, failed, TaskStatus.ERROR)
    live.call(live.manager.cancel(cancelled.id))
    other = str(live.call(live.backend.create_session(title="another parent"))["id"])
    elsewhere = live.call(
        live.manager.task(other, "Profile the tests [tool] [hold:other]", "general", "Profile")
    )
    busy = [
        launch(live, "Update the install docs [tool] [hold:docs]", "Install docs"),
        launch(live, "Fix the flaky test [hold:flaky]", "Flaky test", agent="build"),
    ]
    # five running (the default max_running): the next one waits
    queued = launch(live, "Bump the versions [hold:bump]", "Bump versions", agent="build")
    page = open_page(browser, live, scheme)
    log_in(page)
    for task, status in [
        *((task, "running") for task in busy),
        (queued, "queued"),
        (done, "completed"),
        (resumed, "resumed"),
        (failed, "error"),
        (cancelled, "cancelled"),
        (forked, "running"),
        (elsewhere, "running"),
    ]:
        expect(row(page, task).locator(".badge")).to_have_text(status)
    expect(row(page, forked)).to_contain_text("(forked)")
    expect(row(page, resumed)).to_contain_text("(resumed)")
    expect(page.locator(".group")).to_have_count(2)
    page.wait_for_timeout(1500)  # the running ones tick past 0s
    path = artifacts_dir() / f"dashboard-{scheme}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    row(page, forked).click()  # a fork's detail has its stats
    expect(page.locator("#detail-fork-box")).to_be_visible()
    expect(page.locator("#detail-fork dt").first).to_be_visible()
    page.keyboard.press("Escape")
    row(page, done).click()
    expect(page.locator("#detail-messages .msg")).to_have_count(4)
    page.screenshot(path=str(artifacts_dir() / f"dashboard-detail-{scheme}.png"))


def test_detail_shows_texts_the_events_cut(browser: Browser, live: LiveService) -> None:
    prompt = "Explain " + "every line " * 600  # 6,608 characters: events carry 4,000
    long = launch(live, prompt, "Long answer")
    wait_status(live, long, TaskStatus.COMPLETED)
    page = open_page(browser, live)
    log_in(page)
    row(page, long).click()
    expect(page.locator("#detail-result")).to_have_text("Done: " + prompt)


def test_a_dropped_stream_reconnects_and_resumes(browser: Browser, live: LiveService) -> None:
    first = launch(live, "Index the docs [hold:first]", "Index docs")
    page = open_page(browser, live)
    log_in(page)
    expect(row(page, first).locator(".badge")).to_have_text("running")
    hub = live.app.state.dashboard.hub
    assert live.run(lambda: hub.snapshots_sent) == 1
    live.run(hub.drop_all)  # as if the connection broke
    later = launch(live, "Check the links", "Check links")  # while the page reconnects
    live.run(lambda: live.script.release("first"))
    expect(row(page, later).locator(".badge")).to_have_text("completed")
    expect(row(page, first).locator(".badge")).to_have_text("completed")
    expect(page.locator("#conn")).to_have_text("Live")
    # it resumed after the last event it had (Last-Event-ID): no second snapshot
    assert live.run(lambda: hub.snapshots_sent) == 1
    assert live.run(lambda: hub.subscriber_count) == 1


def test_a_snapshot_after_a_gap_redraws_the_open_task(browser: Browser, live: LiveService) -> None:
    held = launch(live, "Tail the build log [hold:never]", "Build log")
    page = open_page(browser, live)
    log_in(page)
    row(page, held).click()
    expect(page.locator("#detail-status")).to_have_text("running")
    hub = live.app.state.dashboard.hub
    manager = live.manager

    async def cancel_unseen_then_break_the_stream() -> None:
        manager.remove_listener(hub.on_change)  # the stream stays open but hears nothing
        await manager.cancel(held.id)
        hub.reconcile(await manager.store.list_tasks(), seed=True)  # nor does the poll
        hub.drop_all()
        hub._ring.clear()  # events after the page's last one were missed and left the ring:
        hub.last_id += 1  # its next stream starts afresh, with a snapshot
        manager.add_listener(hub.on_change)

    live.call(cancel_unseen_then_break_the_stream())
    expect(row(page, held).locator(".badge")).to_have_text("cancelled")
    expect(page.locator("#detail-status")).to_have_text("cancelled")
    expect(page.locator("#cancel")).to_be_hidden()
    assert live.run(lambda: hub.snapshots_sent) == 2


def test_an_event_older_than_the_task_shown_is_not_applied(
    browser: Browser, live: LiveService
) -> None:
    done = launch(live, "Summarise the changelog", "Changelog")
    wait_status(live, done, TaskStatus.COMPLETED)
    page = open_page(browser, live)
    log_in(page)
    expect(row(page, done).locator(".badge")).to_have_text("completed")
    hub = live.app.state.dashboard.hub
    stored = live.call(live.manager.store.get(done.id))
    assert stored is not None
    stale = stored.model_copy(
        update={"status": TaskStatus.RUNNING, "updated_at": stored.updated_at - 10}
    )
    live.run(lambda: hub.publish("task.updated", event_task_json(stale)))
    later = launch(live, "Check the links", "Check links")  # an event after the stale one
    expect(row(page, later).locator(".badge")).to_have_text("completed")
    expect(row(page, done).locator(".badge")).to_have_text("completed")


def test_a_cancel_answered_after_the_clear_does_not_bring_the_task_back(
    browser: Browser, live: LiveService
) -> None:
    held = launch(live, "Watch the queue [hold:never]", "Queue watcher")
    page = open_page(browser, live)
    log_in(page)
    row(page, held).click()
    expect(page.locator("#detail-status")).to_have_text("running")

    def answer_after_the_clear(route: Any) -> None:
        answer = route.fetch()  # the service cancels the task
        live.call(live.manager.clear(live.parent))  # then its parent's tasks are cleared
        expect(page.locator(".row")).to_have_count(0)  # the page has the clear: now answer
        route.fulfill(response=answer)

    page.route("**/v1/tasks/*/cancel", answer_after_the_clear)
    page.click("#cancel")
    expect(page.locator("#cancel-msg")).to_have_text("Cancelled.")
    expect(page.locator(".row")).to_have_count(0)
    expect(page.locator("#detail-title")).to_have_text(f"{held.id} (removed)")


def test_tokens_and_cost_per_task_and_in_the_header(browser: Browser, live: LiveService) -> None:
    live.backend.step_usage = {
        "tokens": {
            "input": 1000,
            "output": 200,
            "reasoning": 30,
            "cache": {"read": 400, "write": 0},
        },
        "cost": 0.0125,
    }
    done = launch(live, "Read the files [tool]", "Read")  # two tool steps and the reply
    wait_status(live, done, TaskStatus.COMPLETED)
    page = open_page(browser, live)
    log_in(page)
    expect(row(page, done).locator(".tokens")).to_have_text("4.9k tok")  # 3 x 1,630
    expect(row(page, done).locator(".cost")).to_have_text("$0.0375")
    expect(page.locator("#usage-total")).to_have_text(" — 4,890 tokens · $0.0375")
    # a running task's usage arrives live, and the header adds it up
    running = launch(live, "Look [tool] [hold:usage]", "Look")
    expect(row(page, running).locator(".cost")).to_have_text("$0.025")
    expect(row(page, running).locator(".tokens")).to_have_text("3.3k tok")
    expect(page.locator("#usage-total")).to_have_text(" — 8,150 tokens · $0.0625")
    expect(page.locator(".parent-usage")).to_have_text(" · 8.2k tokens · $0.0625")
    row(page, done).click()
    expect(page.locator("#detail-fields")).to_contain_text(
        "Tokens4,890 (input 3,000, output 600, reasoning 90, cache read 1,200, cache write 0)"
    )
    expect(page.locator("#detail-fields")).to_contain_text("Cost$0.0375")
    live.run(lambda: live.script.release("usage"))
    expect(row(page, running).locator(".badge")).to_have_text("completed")
    expect(page.locator("#usage-total")).to_have_text(" — 9,780 tokens · $0.075")


def test_a_task_on_its_own_model_shows_the_model(browser: Browser, live: LiveService) -> None:
    chosen = launch(live, "Summarise the notes", "On its model", model="inprocess/inprocess")
    plain = launch(live, "Summarise again", "Default model")
    wait_status(live, chosen, TaskStatus.COMPLETED)
    wait_status(live, plain, TaskStatus.COMPLETED)
    page = open_page(browser, live)
    log_in(page)
    expect(row(page, chosen).locator(".agent")).to_have_text("general · inprocess/inprocess")
    expect(row(page, plain).locator(".agent")).to_have_text("general")
    row(page, chosen).click()
    fields = page.locator("#detail-fields")
    expect(fields).to_contain_text("Modelinprocess/inprocess")
    page.click("#detail-close")
    row(page, plain).click()
    expect(fields).to_contain_text("Modelthe server's default")


def test_a_queued_task_shows_and_starts_when_a_slot_frees(
    browser: Browser, live: LiveService
) -> None:
    """Over `max_running` (5 by default) a task waits `queued`: shown, counted and filterable,
    with no running time, and cancellable; it runs once a slot frees."""
    held = [launch(live, f"Hold [hold:slot{i}]", f"Slot {i}") for i in range(5)]
    waiting = launch(live, "Wait for a slot [hold:late]", "Waiting one")
    assert waiting.status is TaskStatus.QUEUED
    page = open_page(browser, live)
    log_in(page)
    badge = row(page, waiting).locator(".badge")
    expect(badge).to_have_text("queued")
    expect(row(page, waiting)).to_contain_text("Waiting one")
    expect(row(page, waiting).locator(".dur")).to_have_text("")
    expect(page.locator("#counts")).to_contain_text("6 tasks: 1 queued · 5 running")
    # the status filter hides and shows it
    page.locator('#status-filter input[value="queued"]').uncheck()
    expect(row(page, waiting)).to_have_count(0)
    page.locator('#status-filter input[value="queued"]').check()
    expect(badge).to_have_text("queued")
    # a second queued task is cancelled from its detail, before it ever ran
    dropped = launch(live, "Never mind [hold:never]", "Dropped one")
    row(page, dropped).click()
    expect(page.locator("#detail-status")).to_have_text("queued")
    page.click("#cancel")
    expect(page.locator("#cancel-msg")).to_have_text("Cancelled.")
    expect(page.locator("#detail-status")).to_have_text("cancelled")
    page.keyboard.press("Escape")
    wait_status(live, dropped, TaskStatus.CANCELLED)
    # a free slot admits the first
    live.script.release("slot0")
    wait_status(live, held[0], TaskStatus.COMPLETED)
    expect(badge).to_have_text("running")
    expect(page.locator("#counts")).to_contain_text(
        "7 tasks: 0 queued · 5 running · 0 resumed · 1 completed"
    )
    for i in range(1, 5):
        live.script.release(f"slot{i}")
    live.script.release("late")
    wait_status(live, waiting, TaskStatus.COMPLETED)
    expect(badge).to_have_text("completed")
