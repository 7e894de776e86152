"""clients/js/src/chat-provider.js under the real useXChat, against a gateway on loopback
(memory and Redis backends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.clients.js.support import (
    CLIENT,
    ensure_node_modules,
    run_node_tests_async,
    write_fixed_reply,
)


@pytest.mark.timeout(600)
async def test_chat_provider_node_tests_pass_against_a_real_gateway(
    tmp_path: Path, start_gateway: StartGateway
) -> None:
    ensure_node_modules(CLIENT)
    fixture = write_fixed_reply(tmp_path / "answer.jsonl")
    settings = make_settings(providers={"fixed": {"kind": "fixture", "path": str(fixture)}})
    gateway = await start_gateway(settings)
    try:
        run = await run_node_tests_async(
            "chat-provider.test.js", env={"AGENT_GATEWAY_URL": gateway.url}
        )
    finally:
        await gateway.stop()
    assert run.returncode == 0, run.output
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output
    assert run.counts["pass"] == 14, run.output
