"""examples/antd-x-chat (Ant Design X + useXChat + AgentGatewayChatProvider) in Debian's Chromium.

The gateway serves the example's build at /example/ (same origin). Playwright drives the system
Chromium (``executable_path``); no browser is downloaded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.app.support.gateway_server import RunningGateway, launch, make_settings
from tests.clients.js.support import FIXTURE_TEXT, write_fixed_reply
from tests.examples.support import BROWSER_E2E_ON_MEMORY, ROOT

ARTIFACTS = ROOT / "artifacts"
#: The whole conversation after the stop and after the provider switch (every card in view),
#: and two cards while they wait for the app (Approve / Reject, the tool-result form).
SCREENSHOT = ARTIFACTS / "antd-x-chat.png"
SWITCHED_SHOT = ARTIFACTS / "antd-x-chat-switched.png"
APPROVAL_SHOT = ARTIFACTS / "antd-x-chat-approval.png"
TOOL_FORM_SHOT = ARTIFACTS / "antd-x-chat-tool-form.png"
KEY = "antd-x-e2e"
STREAMING = """() => {
    const all = document.querySelectorAll('[data-testid=assistant]');
    const last = all[all.length - 1];
    return !!last && last.dataset.status === 'updating'
        && last.querySelector('[data-testid=assistant-text]').textContent.length > 0;
}"""
#: How much taller the page must be for the message list to show every card without scrolling.
HIDDEN_HEIGHT = """() => {
    const box = document.querySelector('.ant-bubble-list-scroll-box');
    return box.scrollHeight - box.clientHeight;
}"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    BROWSER_E2E_ON_MEMORY,
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


async def screenshot_whole_chat(page: Page, path: Path) -> None:
    """A screenshot with the viewport grown until the message list needs no scrolling."""
    size = page.viewport_size
    assert size is not None
    hidden = await page.evaluate(HIDDEN_HEIGHT)
    await page.set_viewport_size({"width": size["width"], "height": size["height"] + hidden + 40})
    await page.wait_for_function(f"() => ({HIDDEN_HEIGHT})() <= 0", timeout=10_000)
    await page.screenshot(path=str(path))
    await page.set_viewport_size(size)


def last_assistant(page: Page) -> Locator:
    return page.get_by_test_id("assistant").last


def last_bubble(page: Page) -> Locator:
    """The bubble around the last assistant message (for a screenshot of the whole card)."""
    return page.locator(".ant-bubble-content", has=page.get_by_test_id("assistant")).last


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
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{gateway.url}/example/?c={KEY}")
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("provider-select")).to_contain_text("demo")

    # A prompt streams into the bubble, then completes; its reasoning is in a Think.
    await send(page, "think, then stream")
    await page.wait_for_function(STREAMING, timeout=20_000)
    card = await ended(page, 1, "completed")
    await expect(card.get_by_test_id("assistant-text")).to_have_text(
        "You said: think, then stream. This is the local demo runtime."
    )
    await expect(page.get_by_test_id("user-text").first).to_have_text("think, then stream")
    think = card.get_by_test_id("think")
    await expect(think.locator(".ant-think-status-text")).to_have_text("Planned the answer.")
    await expect(think.locator(".ant-think-content")).to_have_text(
        "Let me work out what is being asked and plan the answer."
    )

    # A high-risk approval: Approve in the ThoughtChain, the approved tool runs.
    await send(page, "approve the deploy")
    approve = last_assistant(page).get_by_test_id("approve")
    await expect(approve).to_be_visible(timeout=20_000)
    await expect(last_assistant(page).locator(".ant-tag-red")).to_have_text("high")
    await expect(last_assistant(page).get_by_test_id("reject")).to_be_visible()
    await last_bubble(page).screenshot(path=str(APPROVAL_SHOT))
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
    await last_bubble(page).screenshot(path=str(TOOL_FORM_SHOT))
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
    await screenshot_whole_chat(page, SCREENSHOT)

    # Reload: the key is in the URL, the conversation comes back from the gateway, word for word.
    texts = await page.get_by_test_id("assistant-text").all_text_contents()
    await page.reload()
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("assistant")).to_have_count(4, timeout=20_000)
    await expect(page.get_by_test_id("assistant-text")).to_have_text(texts)
    await expect(page.get_by_test_id("think")).to_have_count(1)
    statuses = await page.get_by_test_id("run-status").all_text_contents()
    assert statuses == ["completed", "completed", "completed", "cancelled"]
    await expect(page.get_by_test_id("user-text")).to_have_count(4)

    # Switch the gateway provider: the next run is the fixture's, the hook is the same.
    await page.get_by_test_id("provider-select").click()
    await page.locator(".ant-select-item-option", has_text="fixed").click()
    await send(page, "which provider?")
    card = await ended(page, 5, "completed")
    await expect(card.get_by_test_id("assistant-text")).to_have_text(FIXTURE_TEXT)
    await expect(page.get_by_test_id("provider-select")).to_contain_text("fixed")
    await screenshot_whole_chat(page, SWITCHED_SHOT)

    # Conversations: a new chat, then back to this one from the list.
    await page.get_by_test_id("new-chat").click()
    await expect(page.get_by_test_id("assistant")).to_have_count(0)
    assert KEY not in page.url
    listed = page.get_by_test_id(f"conversation-{KEY}")
    await expect(listed).to_have_text("think, then stream")  # the gateway's title: the first prompt
    await listed.click()
    await expect(page.get_by_test_id("conversation-key")).to_have_text(KEY)
    await expect(page.get_by_test_id("assistant")).to_have_count(5, timeout=20_000)
    assert f"c={KEY}" in page.url
    assert errors == []
