"""examples/antd-x-chat with a server tool (MCP), in Debian's Chromium: the tool and its
approval name the server, the approval's JSON editor refuses arguments off the tool's schema
(the gateway's 422 errors shown), then "Approve with edits" runs the edited call."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.app.support.gateway_server import launch, make_settings
from tests.examples.support import BROWSER_E2E_ON_MEMORY
from tests.mcp_server import serve_mcp
from tests.providers.support.mock_upstreams import openai_frames, serve_mock

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), BROWSER_E2E_ON_MEMORY]


async def test_example_approves_a_server_tool_with_edits(
    browser: Browser, example_build: Path
) -> None:
    calls = [("call_1", "tools__echo", '{"text":"hi"}')]
    responses = [openai_frames(tool_calls=calls), openai_frames(text="The tool answered.")]
    async with serve_mcp() as mcp, serve_mock(responses) as upstream:
        settings = make_settings(
            gateway={"default_provider": "chat"},
            providers={
                "chat": {
                    "kind": "openai-chat",
                    "url": upstream.url,
                    "model": "m",
                    "mcp_servers": ["tools"],
                }
            },
            mcp={"servers": {"tools": {"url": mcp.url, "editable": True}}},
        )
        gateway = await launch(settings)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{gateway.url}/example/?c=antd-mcp&provider=chat")
            box = page.locator(".ant-sender textarea").first
            await box.fill("echo hi")
            await box.press("Enter")
            card = page.get_by_test_id("assistant").last
            editor = card.get_by_test_id("approval-editor")
            await expect(editor).to_be_visible(timeout=20_000)
            await expect(card.get_by_test_id("tool-server")).to_have_text("server tools")
            await expect(card.get_by_test_id("approval-server")).to_have_text("server tools")
            assert '"text": "hi"' in await editor.input_value()
            await editor.fill('{"times": "x"}')
            await card.get_by_test_id("approve-modified").click()
            await expect(card.get_by_test_id("approval-error")).to_contain_text(
                "times", timeout=10_000
            )
            await editor.fill('{"text": "edited", "times": 2}')
            await card.get_by_test_id("approve-modified").click()
            await expect(card.get_by_test_id("run-status")).to_have_text(
                "completed", timeout=20_000
            )
            await expect(card.get_by_test_id("approval-decision")).to_have_text("modified")
            await expect(card.get_by_test_id("tool-output")).to_have_text("edited edited")
            await page.close()
        finally:
            await gateway.stop()
    assert errors == []
    assert mcp.server.calls == [("echo", {"text": "edited", "times": 2})]
