"""clients/js/src/chat-provider.js under the real useXChat, against a gateway on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.gateway_server import launch, make_settings
from tests.clients.js.support import CLIENT, ensure_node_modules, run_node_tests_async

#: The second provider the provider-switch test selects: a fixed reply, unlike ``demo``'s.
FIXTURE_TEXT = "Fixture answer."


def write_fixture(path: Path) -> Path:
    def event(seq: int, type_: str, payload: dict[str, object]) -> dict[str, object]:
        return {
            "protocolVersion": "0.1",
            "type": type_,
            "eventId": f"e{seq}",
            "sessionId": "s",
            "runId": "r",
            "sequence": seq,
            "timestamp": 0,
            "payload": payload,
        }

    events = [
        event(0, "run.started", {}),
        event(1, "message.started", {"messageId": "m", "role": "assistant"}),
        event(2, "message.delta", {"messageId": "m", "delta": FIXTURE_TEXT}),
        event(3, "message.completed", {"messageId": "m"}),
        event(4, "run.completed", {}),
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.timeout(600)
async def test_chat_provider_node_tests_pass_against_a_real_gateway(tmp_path: Path) -> None:
    ensure_node_modules(CLIENT)
    fixture = write_fixture(tmp_path / "answer.jsonl")
    settings = make_settings(providers={"fixed": {"kind": "fixture", "path": str(fixture)}})
    gateway = await launch(settings)
    try:
        run = await run_node_tests_async(
            "chat-provider.test.js", env={"AGENT_GATEWAY_URL": gateway.url}
        )
    finally:
        await gateway.stop()
    assert run.returncode == 0, run.output
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output
    assert run.counts["pass"] == 11, run.output
