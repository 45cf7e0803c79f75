"""What makes the page readable, in Debian's headless Chromium against the live service: column
headers, parents by title, creation times, a layout down to 400 px, fork stats in words, a
refused token shown as an error, and OpenCode's provider retries counting down."""

from __future__ import annotations

import re
from typing import Any

import test_page
from asyncagents.service.event_stream import event_task_json
from asyncagents.tasks import TaskStatus
from asyncagents.tasks.models import now_ms
from asyncagents.tasks.session_titles import SessionTitles
from dash_support import TOKEN, LiveService, artifacts_dir
from playwright.sync_api import Browser, Page, expect
from test_page import TIMEOUT_MS, launch, log_in, row, wait_status

# the page tests' fixtures: a Chromium for the module, a live service for each test
browser = test_page.browser
live = test_page.live

COLUMNS = [
    ("Status", ".statuscell"),
    ("Task", ".idcell"),
    ("Agent · model", ".agent"),
    ("Description", ".desc"),
    ("Created", ".created"),
    ("Time", ".dur"),
    ("Tools", ".tools"),
    ("Tokens", ".tokens"),
    ("Cost", ".cost"),
]


def open_at(browser: Browser, live: LiveService, width: int, height: int = 800) -> Page:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(live.url + "/")
    return page


def show(live: LiveService, task_id: str, **fields: Any) -> None:
    """Publish the stored task with `fields` changed (and newer), as the manager would."""

    async def go() -> None:
        stored = await live.manager.store.get(task_id)
        assert stored is not None
        changed = stored.model_copy(update={**fields, "updated_at": stored.updated_at + 60_000})
        live.app.state.dashboard.hub.publish("task.updated", event_task_json(changed))

    live.call(go())


def box(page: Page, selector: str) -> dict[str, float]:
    got = page.locator(selector).bounding_box()
    assert got is not None, selector
    return got


def test_column_headers_line_up_at_1280_px(browser: Browser, live: LiveService) -> None:
    task = launch(live, "Summarise [tool]", "Summarise notes", model="inprocess/inprocess")
    wait_status(live, task, TaskStatus.COMPLETED)
    page = open_at(browser, live, 1280)
    log_in(page)
    cols = page.locator("#cols span")
    expect(cols).to_have_text([name for name, _ in COLUMNS])
    expect(page.locator("#cols")).to_be_visible()
    for i, (name, cell) in enumerate(COLUMNS):
        head = cols.nth(i).bounding_box()
        got = row(page, task).locator(cell).bounding_box()
        assert head is not None and got is not None
        assert abs(head["x"] - got["x"]) <= 2, (name, head, got)
    r = row(page, task)
    expect(r.locator(".agent")).to_have_text("general · inprocess/inprocess")
    expect(r.locator(".desc")).to_have_text("Summarise notes")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    expect(r.locator(".agent")).to_have_attribute("title", "general · inprocess/inprocess")
    for cell in (".badge", ".id", ".desc", ".agent", ".model", ".created"):
        b = r.locator(cell).bounding_box()
        assert b is not None and b["width"] > 0 and b["x"] + b["width"] <= 1280, cell
        # nothing of the cell's text is cut off
        assert r.locator(cell).evaluate("e => e.scrollWidth <= e.clientWidth + 1"), cell


def test_parents_by_title_with_their_id(browser: Browser, live: LiveService) -> None:
    task = launch(live, "Summarise the notes", "Summarise notes")
    wait_status(live, task, TaskStatus.COMPLETED)
    page = open_at(browser, live, 1280)
    log_in(page)
    head = page.locator(f'.group[data-parent="{live.parent}"] .parent')
    expect(head.locator(".ptitle")).to_have_text("parent")
    expect(head.locator(".pid")).to_have_text(live.parent)
    expect(head.locator(".pid")).to_have_class("pid mono secondary")
    expect(head).to_have_attribute("title", f"Parent session {live.parent}")
    expect(head).to_have_text(f"Parent parent{live.parent} · 1 task · 0 tokens · $0.00")
    row(page, task).click()
    expect(page.locator("#detail-fields")).to_contain_text(f"Parent sessionparent ({live.parent})")
    page.keyboard.press("Escape")
    # the text filter finds a task by its parent's title
    page.fill("#q", "PARENT")
    expect(page.locator(".row")).to_have_count(1)


def test_a_parent_whose_title_cannot_be_read_shows_its_id(
    browser: Browser, live: LiveService
) -> None:
    class Down:
        async def get_session(self, session_id: str) -> dict[str, Any]:
            raise TimeoutError

    live.manager.titles = SessionTitles(Down(), deadline=0.5)  # type: ignore[arg-type]
    task = launch(live, "Summarise the notes", "Summarise notes")
    page = open_at(browser, live, 1280)
    log_in(page)
    expect(row(page, task)).to_be_visible()
    head = page.locator(".parent")
    expect(head.locator(".pid")).to_have_class("pid mono")
    expect(head.locator(".ptitle")).to_be_hidden()
    expect(head).to_contain_text(f"Parent {live.parent} · 1 task")


def test_each_row_says_when_the_task_was_created(browser: Browser, live: LiveService) -> None:
    task = launch(live, "Summarise the notes", "Summarise notes")
    wait_status(live, task, TaskStatus.COMPLETED)
    page = open_at(browser, live, 1280)
    log_in(page)
    created = row(page, task).locator(".created")
    expect(created).to_have_text(re.compile(r"^(just now|\d+ s ago)$"))
    absolute = page.evaluate(f"new Date({task.created_at}).toLocaleString()")
    expect(created).to_have_attribute("title", absolute)
    for ago, text in [(3 * 60_000 + 5_000, "3 min ago"), (5 * 3_600_000, "5 h ago")]:
        when = now_ms() - ago
        show(live, task.id, created_at=when)
        expect(created).to_have_text(text)
        expect(created).to_have_attribute(
            "title", page.evaluate(f"new Date({when}).toLocaleString()")
        )
    when = now_ms() - 40_000
    show(live, task.id, created_at=when)
    expect(created).to_have_text(re.compile(r"^4\d s ago$"))
    first = created.inner_text()
    page.wait_for_timeout(2200)
    assert created.inner_text() != first  # it ticks
    show(live, task.id, created_at=now_ms() - 3 * 86_400_000)
    expect(created).to_have_text("3 days ago")
    row(page, task).click()
    expect(page.locator("#detail-fields")).to_contain_text("Created")


def test_at_400_px_every_row_shows_its_id_status_and_description(
    browser: Browser, live: LiveService
) -> None:
    long = "Refactor the storage layer so that every backend shares one migration path " * 2
    tasks = [
        launch(live, "Summarise the notes [tool]", "Summarise notes"),
        launch(live, "Deploy [fail]", long.strip(), agent="build", model="inprocess/inprocess"),
        launch(live, "Watch [hold:never]", "Watch the logs", fork=True),
    ]
    wait_status(live, tasks[0], TaskStatus.COMPLETED)
    wait_status(live, tasks[1], TaskStatus.ERROR)
    page = open_at(browser, live, 400)
    log_in(page)
    expect(page.locator(".row")).to_have_count(3)
    expect(row(page, tasks[2]).locator(".badge")).to_have_text("running")
    expect(page.locator("#cols")).to_be_hidden()  # the headers fit wide screens only
    expect(page.locator(".ptitle")).to_have_text("parent")
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    for task in tasks:
        r = row(page, task)
        for cell in (".badge", ".id", ".desc", ".created"):
            loc = r.locator(cell)
            expect(loc).to_be_visible()
            b = loc.bounding_box()
            assert b is not None and b["x"] >= 0 and b["x"] + b["width"] <= 400, (cell, b)
            # the whole text shows: not cut, not scrolled away
            assert loc.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), cell
        expect(r.locator(".id")).to_have_text(task.id)
        expect(r.locator(".desc")).to_have_text(task.description)
    # status and id on the first line, the description below them
    r = row(page, tasks[1])
    assert (
        box(page, f'.row[data-id="{tasks[1].id}"] .desc')["y"]
        > (box(page, f'.row[data-id="{tasks[1].id}"] .id')["y"])
    )
    assert r.locator(".desc").evaluate("e => e.getClientRects().length >= 1")
    page.screenshot(path=str(artifacts_dir() / "dashboard-400px.png"), full_page=True)
    # the detail fits too
    r.click()
    expect(page.locator("#detail")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    dialog = box(page, "#detail")
    assert dialog["x"] >= 0 and dialog["x"] + dialog["width"] <= 400


FORK_STATS = {
    "original_count": 40,
    "final_count": 12,
    "total_chars": 183_412,
    "truncated_results": 12,
    "removed_messages": 3,
    "compaction_detected": True,
    "compaction_slice_index": 24,
    "tier_distribution": {"tier1": 5, "tier2": 10, "tier3": 25},
    "head_tail_applied": 2,
    "compacted_results": 4,
    "compaction_tail_messages": 2,
    "hard_capped": False,
    "char_budget": 200_000,
    "budget_reason": (
        "the default, as the context window of the server's default model is not known"
    ),
    "fork_turns": 3,
}


def test_fork_stats_in_words(browser: Browser, live: LiveService) -> None:
    forked = launch(live, "Review the plan [tool]", "Review plan", agent="explore", fork=True)
    wait_status(live, forked, TaskStatus.COMPLETED)
    page = open_at(browser, live, 1280)
    log_in(page)
    row(page, forked).click()
    fork = page.locator("#detail-fork")
    # the real fork of a short parent (no messages yet): nothing compacted, nothing cut
    expect(fork.locator("dt")).to_have_text(
        [
            "Messages kept",
            "Context size",
            "Budget",
            "Compaction",
            "Fitting the budget",
            "Tool outputs",
        ]
    )
    stored = live.call(live.manager.store.get(forked.id))
    assert stored is not None and stored.fork_stats is not None
    stats = stored.fork_stats
    expect(fork.locator("dd")).to_have_text(
        [
            f"{stats['final_count']} of the parent's {stats['original_count']} message"
            + ("" if stats["original_count"] == 1 else "s"),
            f"{stats['total_chars']:,} characters",
            f"{stats['char_budget']:,} characters ({stats['budget_reason']})",
            "No compaction in the parent: every message could be kept",
            "Nothing dropped: every kept message fits the budget",
            "None",
        ]
    )
    page.keyboard.press("Escape")
    # a fork of a long, compacted parent
    show(live, forked.id, fork_stats=FORK_STATS)
    row(page, forked).click()
    expect(fork.locator("dt")).to_have_text(
        [
            "Messages kept",
            "Context size",
            "Budget",
            "Compaction",
            "Turns kept",
            "Fitting the budget",
            "Tool outputs",
            "Tool outputs cut",
            "Cleared by OpenCode",
        ]
    )
    expect(fork.locator("dd")).to_have_text(
        [
            "12 of the parent's 40 messages",
            "183,412 characters",
            "200,000 characters (the default, as the context window of the server's default "
            "model is not known)",
            "Kept the last compaction summary, the 2 messages it keeps verbatim before it, and "
            "everything after it; 25 earlier messages left out",
            "The last 3 user turns",
            "The 3 oldest messages dropped to fit the budget",
            "40: the 5 newest whole, the next 10 shortened, 25 older ones shortened more",
            "12 of 40 (2 keeping head and tail)",
            "4 tool outputs already cleared by its compaction",
        ]
    )
    expect(fork).not_to_contain_text("compaction_slice_index")
    page.keyboard.press("Escape")
    # the newest message alone over the budget; a field the page does not know keeps its name
    hard = dict(FORK_STATS, hard_capped=True, removed_messages=0, fork_turns=None, extra=7)
    show(live, forked.id, fork_stats=hard)
    row(page, forked).click()
    expect(fork).to_contain_text(
        "Fitting the budgetThe newest message alone was over the budget: its text was cut, "
        "head and tail kept"
    )
    expect(fork).not_to_contain_text("Turns kept")
    expect(fork.locator("dt").last).to_have_text("extra")
    expect(fork.locator("dd").last).to_have_text("7")


def test_a_refused_token_is_an_error_not_help_text(browser: Browser, live: LiveService) -> None:
    page = open_at(browser, live, 1280)
    expect(page.locator("#login")).to_be_visible()
    error = page.locator("#login-error")
    expect(error).to_be_hidden()  # no error before a token is tried
    page.fill("#token", "not-the-token")
    page.press("#token", "Enter")
    alert = page.get_by_role("alert").filter(has_text="The service refused this token.")
    expect(alert).to_be_visible()
    expect(error).to_have_text("The service refused this token.")
    color = error.evaluate("e => getComputedStyle(e).color")
    help_color = page.locator("#login .help").evaluate("e => getComputedStyle(e).color")
    assert color != help_color
    assert color == "rgb(179, 38, 30)"  # the page's error red (--error), as the error badges
    assert error.evaluate("e => getComputedStyle(e).borderLeftColor") == "rgb(179, 38, 30)"
    # the right token clears it
    page.fill("#token", TOKEN)
    page.press("#token", "Enter")
    expect(page.locator("#conn")).to_have_text("Live")
    page.click("#logout")
    expect(error).to_be_hidden()


def test_a_provider_retry_counts_down(browser: Browser, live: LiveService) -> None:
    task = launch(live, "Summarise the notes [hold:retry]", "Summarise notes")
    page = open_at(browser, live, 1280)
    log_in(page)
    r = row(page, task)
    expect(r.locator(".badge")).to_have_text("running")
    expect(r.locator(".retry")).to_have_count(0)
    next_ms = now_ms() + 30_000
    stored = live.call(live.manager.store.get(task.id))
    assert stored is not None and stored.session_id is not None
    status = {"type": "retry", "attempt": 2, "message": "Rate limited", "next": next_ms}
    live.run(
        lambda: live.backend.publish(
            "session.status", {"sessionID": stored.session_id, "status": status}
        )
    )
    retry = r.locator(".retry")
    expect(retry).to_have_text(re.compile(r"^retry 2 in (29|30)s$"))
    first = int(re.findall(r"\d+", retry.inner_text())[1])
    page.wait_for_timeout(2200)
    later = int(re.findall(r"\d+", retry.inner_text())[1])
    assert first - 3 <= later <= first - 1, (first, later)  # it counts down
    when = page.evaluate(f"new Date({next_ms}).toLocaleTimeString()")
    expect(retry).to_have_attribute(
        "title", f"OpenCode is retrying the provider: Rate limited. Next try at {when}."
    )
    assert retry.evaluate("e => getComputedStyle(e).color") == "rgb(179, 38, 30)"
    expect(r).to_have_attribute("aria-label", re.compile(r"^running \(retry 2 in \d+s\): "))
    # the detail says it in full, counting down too
    r.click()
    detail = re.compile(
        rf"OpenCode retryingattempt 2: Rate limited; next try in (\d+)s \({re.escape(when)}\)"
    )
    expect(page.locator("#detail-fields")).to_contain_text(detail)
    fields = page.locator("#detail-fields")
    before = detail.search(fields.text_content() or "")
    page.wait_for_timeout(2200)
    after = detail.search(fields.text_content() or "")
    assert before is not None and after is not None
    assert int(after[1]) < int(before[1]), (before[0], after[0])
    page.keyboard.press("Escape")
    # at its time it says so
    soon = now_ms() + 1_500
    live.run(
        lambda: live.backend.publish(
            "session.status",
            {"sessionID": stored.session_id, "status": dict(status, attempt=3, next=soon)},
        )
    )
    expect(retry).to_have_text("retry 3 now")
    # the turn ends: no retry is shown
    live.run(lambda: live.script.release("retry"))
    expect(r.locator(".badge")).to_have_text("completed")
    expect(r.locator(".retry")).to_have_count(0)


def test_a_turn_tried_again_counts_down_in_the_queue(browser: Browser, live: LiveService) -> None:
    """A turn that ended on a rate limit waits `queued` for its backoff (30 s, the default
    ``retry_initial``): the row counts down to the next try, with the error and the model."""
    task = launch(live, "Summarise the notes [429]", "Summarise notes")
    page = open_at(browser, live, 1280)
    log_in(page)
    r = row(page, task)
    expect(r.locator(".badge")).to_have_text("queued")
    retry = r.locator(".retry")
    expect(retry).to_have_text(re.compile(r"^try 2 in (2[89]|30)s$"))
    first = int(re.findall(r"\d+", retry.inner_text())[1])
    page.wait_for_timeout(2200)
    later = int(re.findall(r"\d+", retry.inner_text())[1])
    assert first - 3 <= later <= first - 1, (first, later)  # it counts down
    stored = live.call(live.manager.store.get(task.id))
    assert stored is not None and stored.retry_at is not None
    when = page.evaluate(f"new Date({stored.retry_at}).toLocaleTimeString()")
    expect(retry).to_have_attribute(
        "title",
        "Tried again after a provider error: APIError: Rate limited: slow down. "
        f"Try 2 on the server's default model from {when}.",
    )
    expect(r).to_have_attribute("aria-label", re.compile(r"^queued \(try 2 in \d+s\): "))
    r.click()
    fields = page.locator("#detail-fields")
    expect(fields).to_contain_text("Last provider errorAPIError: Rate limited: slow down")
    expect(fields).to_contain_text(re.compile(r"Next trytry 2 in \d+s"))
    page.keyboard.press("Escape")
    # cancelled while it waits: no try is shown
    live.call(live.manager.cancel(task.id))
    expect(r.locator(".badge")).to_have_text("cancelled")
    expect(r.locator(".retry")).to_have_count(0)
