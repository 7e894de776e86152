"""clients/js/test/mcp-approval.test.js: the useXChat provider approves a server tool (MCP)
with edits, against a real gateway (both backends), a real MCP server and a mock model
upstream speaking OpenAI Chat."""

from __future__ import annotations

import pytest

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.clients.js.support import CLIENT, ensure_node_modules, run_node_tests_async
from tests.mcp_server import serve_mcp
from tests.providers.support.mock_upstreams import openai_frames, serve_mock


@pytest.mark.timeout(600)
async def test_use_xchat_provider_approves_a_server_tool_with_edits(
    start_gateway: StartGateway,
) -> None:
    ensure_node_modules(CLIENT)
    calls = [("call_1", "tools__echo", '{"text":"hi"}')]

    def answer(body: dict[str, object]) -> list[str]:
        messages = body["messages"]
        assert isinstance(messages, list)
        return openai_frames(text=f"The tool said: {messages[-1]['content']}")

    async with serve_mcp() as mcp, serve_mock([openai_frames(tool_calls=calls), answer]) as up:
        settings = make_settings(
            providers={
                "chat": {
                    "kind": "openai-chat",
                    "url": up.url,
                    "model": "m",
                    "mcp_servers": ["tools"],
                }
            },
            mcp={"servers": {"tools": {"url": mcp.url, "editable": True}}},
        )
        gateway = await start_gateway(settings)
        try:
            run = await run_node_tests_async(
                "mcp-approval.test.js", env={"AGENT_GATEWAY_URL": gateway.url}
            )
        finally:
            await gateway.stop()
    assert run.returncode == 0, run.output
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output
    assert run.counts["pass"] == 1, run.output
    assert mcp.server.calls == [("echo", {"text": "edited", "times": 2})]
