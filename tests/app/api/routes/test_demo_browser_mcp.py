"""The demo page with a server tool (MCP) in a real browser: the tool shows its server, the
approval card shows the exact call with an argument editor, and "Approve with edits" runs the
edited call (a real gateway, MCP server and OpenAI Chat mock upstream)."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.app.api.routes.test_demo_browser import (
    browser as browser,  # the fixture: system Chromium
)
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.mcp_server import serve_mcp
from tests.providers.support.mock_upstreams import openai_frames, serve_mock


@pytest.mark.slow
async def test_demo_page_approves_a_server_tool_with_edits(
    browser: Browser, start_gateway: StartGateway
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
        gw = await start_gateway(settings)
        page = await browser.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(f"{gw.url}/?c=browser-mcp")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "open")
        await page.get_by_test_id("prompt").fill("echo hi")
        await page.get_by_test_id("send").click()
        card = page.locator("[data-testid=approval]").last
        editor = card.get_by_test_id("approval-editor")
        await expect(editor).to_be_visible(timeout=15_000)
        await expect(card.get_by_test_id("approval-server")).to_have_text(
            "server tools · tool echo"
        )
        tool = page.locator("[data-testid=tool]").last
        await expect(tool).to_have_attribute("data-server", "tools")
        await expect(tool.locator(".label")).to_have_text("tool · tools__echo · server tools")
        assert '"text": "hi"' in await editor.input_value()
        await editor.fill('{"text": "edited", "times": 2}')
        await card.get_by_test_id("approve-modified").click()
        await expect(card.get_by_test_id("approval-decision")).to_have_text(
            "decision: modified", timeout=10_000
        )
        await expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=15_000)
        await expect(tool.get_by_test_id("tool-result")).to_contain_text("edited edited")
        await expect(editor).to_be_hidden()
        await page.close()
    assert errors == []
    assert mcp.server.calls == [("echo", {"text": "edited", "times": 2})]
