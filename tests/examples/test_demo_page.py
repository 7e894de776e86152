"""The demo page (app/static) as a new user meets it, in Debian's Chromium."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from tests.app.support.gateway_server import launch, make_settings
from tests.examples.support import BROWSER_E2E_ON_MEMORY, ROOT

pytestmark = [
    pytest.mark.slow,
    BROWSER_E2E_ON_MEMORY,
]

#: The page at 1280 px after the failed run: the header on one line, the failure's reason.
SCREENSHOT = ROOT / "artifacts" / "demo-new-user.png"

HEADER_ON_ONE_LINE = """() => {
    const items = [...document.querySelectorAll('.bar h1, .bar label, .bar .badge, .bar button')];
    const tops = items.map((e) => e.getBoundingClientRect().top);
    return Math.max(...tops) - Math.min(...tops);
}"""


async def send(page: Page, prompt: str) -> None:
    await page.get_by_test_id("prompt").fill(prompt)
    await page.get_by_test_id("prompt").press("Enter")


async def test_demo_page_fixes(browser: Browser) -> None:
    settings = make_settings(
        gateway={"default_provider": "demo"},
        providers={
            "demo": {"kind": "local-demo", "delay_ms": 5},
            "second-provider": {"kind": "local-demo", "delay_ms": 5},
        },
    )
    gateway = await launch(settings)
    try:
        page = await browser.new_page(viewport={"width": 1200, "height": 800})
        runs_posted: list[str] = []
        page.on("request", lambda r: runs_posted.append(r.url) if r.url.endswith("/runs") else None)
        await page.goto(f"{gateway.url}/")
        await expect(page.get_by_test_id("connection")).to_contain_text("live")

        # The generated key is in the URL at once.
        key = await page.get_by_test_id("conversation-key").input_value()
        assert f"c={key}" in page.url

        # 1200–1280 px: the header holds on one line (no button alone on a second one).
        for width in (1200, 1240, 1280):
            await page.set_viewport_size({"width": width, "height": 800})
            spread = await page.evaluate(HEADER_ON_ONE_LINE)
            assert spread < 8, f"header wraps at {width}px (rows {spread}px apart)"

        # A failed run shows the reason: run.failed's error message, not only a badge.
        await send(page, "please fail")
        reason = page.locator(".run").last.get_by_test_id("run-error")
        await expect(reason).to_be_visible(timeout=20_000)
        async with gateway.client() as http:
            state = (await http.get(f"/v1/conversations/{key}/state")).json()
        (run,) = state["agentState"]["runs"].values()
        assert run["status"] == "failed"
        await expect(reason).to_have_text(
            f"Run failed ({run['error']['code']}): {run['error']['message']}"
        )
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOT))

        # An invalid key: Send is off, Enter sends nothing (not to the previous key either).
        posted = len(runs_posted)
        await page.get_by_test_id("conversation-key").fill("not a key!")
        await page.get_by_test_id("conversation-key").press("Tab")
        await expect(page.get_by_test_id("send")).to_be_disabled()
        await expect(page.get_by_test_id("error")).to_contain_text("conversation key")
        await send(page, "should not be sent")
        await page.get_by_test_id("reload").click(force=True)
        async with gateway.client() as http:
            state = (await http.get(f"/v1/conversations/{key}/state")).json()
        assert len(state["agentState"]["runs"]) == 1
        assert len(runs_posted) == posted
        assert f"c={key}" in page.url

        # A valid key again: sending works, to the new key, which the URL now holds.
        await page.get_by_test_id("conversation-key").fill("demo-fixed-key")
        await page.get_by_test_id("conversation-key").press("Tab")
        await expect(page.get_by_test_id("send")).to_be_enabled()
        await expect(page.get_by_test_id("error")).to_be_hidden()
        await send(page, "hello again")
        await expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=20_000)
        assert "c=demo-fixed-key" in page.url

        # A reload keeps the conversation: the key from the URL, its history from the gateway.
        await page.reload()
        await expect(page.get_by_test_id("conversation-key")).to_have_value("demo-fixed-key")
        await expect(page.locator(".run")).to_have_count(1, timeout=20_000)
        user = page.locator(".message.role-user").get_by_test_id("message-content")
        await expect(user).to_have_text("hello again")
    finally:
        await gateway.stop()
