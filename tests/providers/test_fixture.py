"""fixture provider: a recorded AgentEvent JSONL replayed, re-stamped into the gateway's run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from core.factory import EventFactory
from providers.fixture import FixtureProvider
from providers.local_demo import LocalDemoProvider
from providers.registry import UnknownProviderKind, create_provider, known_kinds
from providers.testing import assert_provider_contract, make_options, run_collect


async def record(tmp_path: Path, prompt: str, **kw: Any) -> Path:
    events = await run_collect(
        LocalDemoProvider("demo", delay_ms=0),
        {"prompt": prompt},
        options=make_options("ses_rec", "run_rec", start_session=True),
        **kw,
    )
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    return path


async def test_replay_restamps_into_gateway_run(tmp_path: Path) -> None:
    path = await record(tmp_path, "think search task artifact")
    provider = FixtureProvider("fx", path)
    events = await assert_provider_contract(
        provider,
        input={"prompt": "replay"},
        options=make_options("ses_gw", "run_gw"),
        expect_terminal="run.completed",
    )
    assert {e["sessionId"] for e in events} == {"ses_gw"}
    assert {e["runId"] for e in events} == {"run_gw"}
    restamped = [e for e in events if "upstream" in e.get("meta", {})]
    assert restamped and all(e["meta"]["upstream"]["runId"] == "run_rec" for e in restamped)
    # the recording's own user message is skipped: the gateway emitted its own ("replay")
    users = [e for e in events if e["type"] == "message.started" and e["payload"]["role"] == "user"]
    assert [u["payload"]["content"] for u in users] == ["replay"]
    assert sum(e["type"] == "tool.completed" for e in events) == 1


async def test_recording_without_terminal_fails_with_upstream_dropped(tmp_path: Path) -> None:
    path = await record(tmp_path, "hello")
    lines = path.read_text().splitlines()[:-2]  # drop message.completed + run.completed
    path.write_text("\n".join(lines) + "\n")
    events = await assert_provider_contract(
        FixtureProvider("fx", path), input={"prompt": "x"}, expect_terminal="run.failed"
    )
    assert events[-1]["payload"]["error"]["code"] == "upstream_dropped"
    assert events[-2]["type"] == "message.failed"


async def test_invalid_recorded_event_is_a_protocol_error(tmp_path: Path) -> None:
    factory = EventFactory("s", "r")
    lines = [
        factory.create("run.started", {}),
        factory.create("message.started", {"messageId": "m", "role": "assistant"}),
        {**factory.create("message.delta", {"messageId": "m", "delta": "x"}), "sequence": -3},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in lines))
    events = await assert_provider_contract(
        FixtureProvider("fx", path), input={"prompt": "x"}, expect_terminal="run.failed"
    )
    assert events[-1]["payload"]["error"]["code"] == "upstream_protocol_error"


async def test_follow_up_for_unknown_entity_is_a_protocol_error(tmp_path: Path) -> None:
    factory = EventFactory("s", "r")
    lines = [
        factory.create("run.started", {}),
        factory.create("message.delta", {"messageId": "ghost", "delta": "x"}),
    ]
    path = tmp_path / "ghost.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in lines))
    events = await assert_provider_contract(
        FixtureProvider("fx", path), input={}, expect_terminal="run.failed"
    )
    assert events[-1]["payload"]["error"]["code"] == "upstream_protocol_error"


async def test_recorded_run_failure_becomes_upstream_error(tmp_path: Path) -> None:
    path = await record(tmp_path, "fail")
    events = await assert_provider_contract(
        FixtureProvider("fx", path), input={"prompt": "x"}, expect_terminal="run.failed"
    )
    error = events[-1]["payload"]["error"]
    assert error["code"] == "upstream_error"
    assert error["details"]["code"] == "upstream_error"


async def test_timed_replay(tmp_path: Path) -> None:
    factory = EventFactory("s", "r")
    chunks = [
        {"atMs": 0, "chunk": factory.create("run.started", {})},
        {"atMs": 30, "chunk": factory.create("run.completed", {})},
    ]
    path = tmp_path / "timed.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(c) for c in chunks))
    events = await assert_provider_contract(
        FixtureProvider("fx", path, timed=True), input={}, expect_terminal="run.completed"
    )
    assert [e["type"] for e in events] == ["run.started", "run.completed"]


def test_registry_kinds_and_errors(tmp_path: Path) -> None:
    assert {"local-demo", "fixture", "agent-event"} <= set(known_kinds())
    with pytest.raises(UnknownProviderKind, match="Unknown provider kind"):
        create_provider("x", "no-such-kind", {})
    with pytest.raises(ValueError, match="needs a"):
        create_provider("x", "fixture", {})
    path = tmp_path / "f.jsonl"
    path.write_text("")
    provider = create_provider("fx", "fixture", {"path": str(path)})
    assert provider.id == "fx"
    native = create_provider(
        "n", "agent-event", {"url": "ws://127.0.0.1:1/x", "transport": "websocket"}
    )
    assert native.transport.kind == "websocket"
    assert native.capabilities.transports == ("websocket",)
