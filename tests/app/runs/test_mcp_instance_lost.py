"""The owner of a run dies (``kill -9``) while the MCP server runs one of its tool calls: the
run ends ``gateway_instance_lost`` on the other instance like any run, and no instance calls
the tool again (no replay)."""

from __future__ import annotations

import asyncio

import pytest

from tests.app.support.cluster_support import LEASE_TTL, Subscriber, cluster, is_terminal, post_run
from tests.mcp_server import serve_mcp
from tests.providers.support.mock_upstreams import openai_frames, serve_mock

pytestmark = pytest.mark.only_backend("redis", reason="two gateway processes sharing one Redis")


async def test_owner_killed_mid_call_ends_the_run_instance_lost_without_replay() -> None:
    calls = [("call_1", "tools__slow", '{"seconds": 60}')]
    async with (
        serve_mcp() as served,
        serve_mock([openai_frames(tool_calls=calls)] * 2) as upstream,
        cluster(upstream.url, lease_ttl=LEASE_TTL, mcp_url=served.url) as (a, b),
    ):
        sub = Subscriber(b.url, "c1", is_terminal)
        await sub.started()
        res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
        assert res.status_code == 202, res.text
        await asyncio.wait_for(served.server.slow_started.wait(), 60)
        a.kill()
        events = await sub.done(LEASE_TTL + 10)
        running = [e for e in events if e["type"] == "tool.running"]
        assert len(running) == 1
        last = events[-1]
        assert last["type"] == "run.failed"
        assert last["payload"]["error"]["code"] == "gateway_instance_lost"
        tool_end = [e for e in events if e["type"] in ("tool.failed", "tool.cancelled")]
        assert len(tool_end) == 1 and tool_end[0]["payload"]["toolCallId"] == "call_1"
    assert [name for name, _ in served.server.calls] == ["slow"]  # called once, never again
    assert len(upstream.requests) == 1
