"""examples/antd-x-chat (Ant Design X + useXChat + AgentGatewayChatProvider) in Debian's Chromium.

The gateway serves the example's build at /example/ (same origin). Playwright drives the system
Chromium (``executable_path``); no browser is downloaded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.app.gateway_server import RunningGateway, launch, make_settings
from tests.clients.js.support import FIXTURE_TEXT, write_fixed_reply
from tests.examples.support import ROOT

SCREENSHOT = ROOT / "artifacts" / "antd-x-chat.png"
KEY = "antd-x-e2e"
STREAMING = """() => {
    const all = document.querySelectorAll('[data-testid=assistant]');
    const last = all[all.length - 1];
    return !!last && last.dataset.status === 'updating'
        && last.querySelector('[data-testid=assistant-text]').textContent.length > 0;
}"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.only_backend(
        "memory",
        reason=(
            "a browser end-to-end test of the page itself; the routes it calls run on both"
            " backends in tests/app and tests/clients/js, and Redis would double its minutes"
            " of browser time"
        ),
    ),
]


@pytest.fixture
async def gateway(example_build: Path, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    fixed = write_fixed_reply(tmp_path / "fixed.jsonl")
    settings = make_settings(
        gateway={"default_provider": "demo"},
        providers={
            "demo": {"kind": "local-demo", "delay_ms": 60},
            "fixed": {"kind": "fixture", "path": str(fixed)},
        },
    )
    running = await launch(settings)
    try:
        yield running
    finally:
        await running.stop()


def last_assistant(page: Page) -> Locator:
    return page.get_by_test_id("assistant").last


async def send(page: Page, prompt: str) -> None:
    box = page.locator(".ant-sender textarea").first
    await box.fill(prompt)
    await box.press("Enter")


async def ended(page: Page, count: int, status: str) -> Locator:
    """The ``count``-th assistant message once its run ended ``status``."""
    await expect(page.get_by_test_id("assistant")).to_have_count(count, timeout=20_000)
    card = last_assistant(page)
    await expect(card.get_by_test_id("run-status")).to_have_text(status, timeout=20_000)
    return card


async def test_antd_x_chat_end_to_end(browser: Browser, gateway: RunningGateway) -> None:
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{gateway.url}/example/?c={KEY}")
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("provider-select")).to_contain_text("demo")

    # A prompt streams into the bubble, then completes.
    await send(page, "hello stream")
    await page.wait_for_function(STREAMING, timeout=20_000)
    card = await ended(page, 1, "completed")
    await expect(card.get_by_test_id("assistant-text")).to_have_text(
        "You said: hello stream. This is the local demo runtime."
    )
    await expect(page.get_by_test_id("user-text").first).to_have_text("hello stream")

    # A high-risk approval: Approve in the ThoughtChain, the approved tool runs.
    await send(page, "approve the deploy")
    approve = last_assistant(page).get_by_test_id("approve")
    await expect(approve).to_be_visible(timeout=20_000)
    await expect(last_assistant(page).locator(".ant-tag-red")).to_have_text("high")
    await approve.click()
    card = await ended(page, 2, "completed")
    await expect(card.get_by_test_id("approval-decision")).to_have_text("approved")
    await expect(card.get_by_test_id("tool-title")).to_have_text("Tool · deploy")
    await expect(card.get_by_test_id("assistant-text")).to_contain_text("Deployed as approved.")

    # A tool the app answers: the result form sends it, the same run quotes it.
    await send(page, "weather please")
    form = last_assistant(page).get_by_test_id("tool-result-form")
    await expect(form).to_be_visible(timeout=20_000)
    await form.get_by_test_id("tool-result").fill('{"tempC": 7, "sky": "rain"}')
    await form.get_by_test_id("tool-submit").click()
    card = await ended(page, 3, "completed")
    await expect(card.get_by_test_id("assistant-text")).to_contain_text(
        'The weather tool answered: {"tempC": 7, "sky": "rain"}.'
    )
    await expect(card.get_by_test_id("tool-result-form")).to_have_count(0)

    # Stop a slow answer: the card shows it cancelled, the gateway run ended run.cancelled.
    await send(page, "slow please")
    await page.wait_for_function(STREAMING, timeout=20_000)
    await page.locator(".ant-sender [class*=loading-button]").click()
    card = await ended(page, 4, "cancelled")
    await expect(card).to_have_attribute("data-status", "abort")
    run_id = await card.get_attribute("data-run-id")
    async with gateway.client() as http:
        record = (await http.get(f"/v1/conversations/{KEY}/runs/{run_id}")).json()
        state = (await http.get(f"/v1/conversations/{KEY}/state")).json()
    assert record["status"] == "cancelled", record
    assert len(state["agentState"]["runs"]) == 4
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOT), full_page=True)

    # Reload: the key is in the URL, the conversation comes back from the gateway.
    await page.reload()
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("assistant")).to_have_count(4, timeout=20_000)
    statuses = await page.get_by_test_id("run-status").all_text_contents()
    assert statuses == ["completed", "completed", "completed", "cancelled"]
    await expect(page.get_by_test_id("user-text")).to_have_count(4)

    # Switch the gateway provider: the next run is the fixture's, the hook is the same.
    await page.get_by_test_id("provider-select").click()
    await page.locator(".ant-select-item-option", has_text="fixed").click()
    await send(page, "which provider?")
    card = await ended(page, 5, "completed")
    await expect(card.get_by_test_id("assistant-text")).to_have_text(FIXTURE_TEXT)

    # Conversations: a new chat, then back to this one from the list.
    await page.get_by_test_id("new-chat").click()
    await expect(page.get_by_test_id("assistant")).to_have_count(0)
    assert KEY not in page.url
    listed = page.get_by_test_id(f"conversation-{KEY}")
    await expect(listed).to_have_text("hello stream")  # the gateway's title: the first prompt
    await listed.click()
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("assistant")).to_have_count(5, timeout=20_000)
    assert f"c={KEY}" in page.url
    assert errors == []
