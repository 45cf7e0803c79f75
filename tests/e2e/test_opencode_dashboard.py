"""The dashboard end to end, as a new user meets it: ``asyncagents serve`` over a real ``opencode
serve`` (plugin installed by ``asyncagents opencode install``), the scripted model starting tasks
through the plugin, and the page open in Debian's headless Chromium (Playwright): the tasks
appear, finish and are cancelled live."""

from __future__ import annotations

import sys
from pathlib import Path

from asyncagents.tasks import OpenCodeBackend
from e2e_support import AGENT
from playwright.async_api import async_playwright, expect
from plugin_support import ServiceProcess, call, new_parent, say_to, started_task_id, tool_outputs
from test_opencode_plugin import (  # noqa: F401  (the same module fixtures, a server of our own)
    oc,
    plugin_opencode,
    plugin_root,
    service,
    service_port,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dashboard"))
from dash_support import CHROMIUM_ARGS, artifacts_dir, ensure_chromium

TIMEOUT_MS = 60_000  # a real OpenCode on a shared machine
expect.set_options(timeout=TIMEOUT_MS)  # expect has its own default (5 s), not the page's


async def test_the_page_follows_tasks_an_agent_starts(
    service: ServiceProcess,  # noqa: F811
    oc: OpenCodeBackend,  # noqa: F811
    plugin_root: Path,  # noqa: F811
) -> None:
    token = (plugin_root / "state" / "asyncagents" / "token").read_text().strip()
    executable = ensure_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 720})
            context.set_default_timeout(TIMEOUT_MS)
            page = await context.new_page()
            await page.goto(service.url + "/")
            await page.fill("#token", token)
            await page.press("#token", "Enter")
            await expect(page.locator("#conn")).to_have_text("Live")

            parent = await new_parent(oc)
            await say_to(
                oc,
                parent,
                call(
                    "asyncagents_task",
                    {"prompt": "[fake:slow] take your time", "agent": AGENT, "description": "slow"},
                ),
            )
            slow = started_task_id((await tool_outputs(oc, parent, "asyncagents_task"))[-1])
            slow_row = page.locator(f'.row[data-id="{slow}"]')
            await expect(slow_row.locator(".badge")).to_have_text("running")
            await expect(page.locator(".parent")).to_contain_text(parent)
            # the parent by the title OpenCode keeps for it (GET /session/{id}), its id beside
            head = page.locator(f'.group[data-parent="{parent}"] .parent')
            await expect(head.locator(".ptitle")).to_have_text("plugin parent")
            await expect(head.locator(".pid")).to_have_text(parent)
            await expect(page.locator("#cols span")).to_have_text(
                [
                    "Status",
                    "Task",
                    "Agent · model",
                    "Description",
                    "Created",
                    "Time",
                    "Tools",
                    "Tokens",
                    "Cost",
                ]
            )

            await say_to(
                oc,
                parent,
                call("asyncagents_task", {"prompt": "say hi", "agent": AGENT, "description": "hi"}),
            )
            quick = started_task_id((await tool_outputs(oc, parent, "asyncagents_task"))[-1])
            quick_row = page.locator(f'.row[data-id="{quick}"]')
            await expect(quick_row.locator(".badge")).to_have_text("completed")

            # cancel the slow one from its detail
            await slow_row.click()
            await expect(page.locator("#detail-status")).to_have_text("running")
            await page.click("#cancel")
            try:
                await expect(page.locator("#detail-status")).to_have_text("cancelled")
            except AssertionError as exc:  # what the page and the service said, for the log
                said = await page.locator("#cancel-msg").text_content()
                raise AssertionError(f"{exc}\npage: {said!r}\n{service.log_tail()}") from exc
            await page.keyboard.press("Escape")
            await expect(slow_row.locator(".badge")).to_have_text("cancelled")
            await page.screenshot(path=str(artifacts_dir() / "dashboard-opencode.png"))
            # the agent sees the cancel too
            await say_to(oc, parent, call("asyncagents_output", {"task_id": slow}))
            output = (await tool_outputs(oc, parent, "asyncagents_output"))[-1]
            assert output.startswith(f"Task `{slow}` [cancelled]"), output
        finally:
            await browser.close()
