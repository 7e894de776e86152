"""Approvals bound to the exact call of a server tool: the events in order, the approval's
data/version/expiry, and what each decision runs (or refuses) — against the real test server."""

from __future__ import annotations

from typing import Any

import pytest

from providers.contract import AgentEvent, Command
from providers.mcp.config import call_version
from providers.openai_chat import OpenAIChatProvider
from providers.testing import make_options, run_collect
from providers.validator import validate_agent_provider_events
from tests.mcp_server import serve_mcp
from tests.providers.mcp.support import of_type, settings_for, types_of
from tests.providers.support.mock_upstreams import openai_frames, serve_mock

ECHO = [("call_1", "tools__echo", '{"text":"hi"}')]


def resolve(decision: str, data: Any = None) -> Any:
    """A lazy command: resolve the approval waiting in the events so far."""

    def make(events: list[AgentEvent]) -> Command:
        waiting = of_type(events, "approval.requested")
        assert waiting, "no approval waits"
        payload: dict[str, Any] = {
            "approvalId": waiting[-1]["payload"]["approvalId"],
            "decision": decision,
        }
        if data is not None:
            payload["data"] = data
        return Command("approval.resolve", payload)

    return make


async def approval_run(
    commands: list[Any], *, wait_timeout: float = 20, **server: Any
) -> tuple[list[AgentEvent], Any, list[dict[str, Any]]]:
    server.setdefault("approval", "always")
    async with serve_mcp() as mcp_server:
        responses = [openai_frames(tool_calls=ECHO), openai_frames(text="ok")]
        async with serve_mock(responses) as mock:
            settings = settings_for(mcp_server.url, **server)
            provider = OpenAIChatProvider(url=mock.url, model="m", mcp=settings)
            options = make_options(wait_timeout_seconds=wait_timeout)
            events = await run_collect(
                provider, {"prompt": "go"}, options=options, commands=commands
            )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events, mcp_server.server, mock.requests


def sequence(events: list[AgentEvent]) -> list[str]:
    return types_of(
        events,
        "tool.requested",
        "tool.running",
        "tool.completed",
        "tool.failed",
        "approval.",
        "run.completed",
        "run.failed",
    )


async def test_approved_runs_exactly_the_arguments_shown() -> None:
    events, server, requests = await approval_run(
        [resolve("approved")], editable=True, approval_expires_seconds=60
    )
    assert sequence(events) == [
        "tool.requested",
        "approval.requested",
        "approval.resolved",
        "tool.running",
        "tool.completed",
        "run.completed",
    ]
    approval = of_type(events, "approval.requested")[0]
    payload, meta = approval["payload"], approval["meta"]
    assert payload["toolCallId"] == "call_1" and payload["data"] == {"text": "hi"}
    assert payload["editable"] is True
    assert payload["version"] == call_version("tools", "echo", {"text": "hi"})
    assert payload["expiresAt"] == 1000 + 60_000  # make_options' clock stands at 1000 ms
    assert meta["server"] == "tools" and meta["tool"] == "echo"
    assert meta["inputSchema"]["required"] == ["text"]
    assert server.calls == [("echo", {"text": "hi", "times": 1})]
    assert len(requests) == 2


def test_version_binds_server_tool_and_arguments() -> None:
    base = call_version("s", "t", {"a": 1, "b": 2})
    assert base == call_version("s", "t", {"b": 2, "a": 1})  # key order does not matter
    assert (
        len(
            {
                base,
                call_version("s", "t", {"a": 1}),
                call_version("s", "u", {"a": 1, "b": 2}),
                call_version("r", "t", {"a": 1, "b": 2}),
            }
        )
        == 4
    )


async def test_modified_runs_the_edited_arguments() -> None:
    edited = {"text": "edited", "times": 3}
    events, server, _ = await approval_run([resolve("modified", edited)], editable=True)
    assert server.calls == [("echo", edited)]
    running = of_type(events, "tool.running")[0]
    assert running["meta"]["arguments"] == edited
    assert of_type(events, "tool.completed")[0]["payload"]["result"] == "edited edited edited"


async def test_modified_with_arguments_off_the_schema_never_runs() -> None:
    # the gateway refuses such a resolve before (422); the provider holds the line as well
    events, server, _ = await approval_run([resolve("modified", {"times": "x"})], editable=True)
    assert server.calls == []
    error = of_type(events, "tool.failed")[0]["payload"]["error"]
    assert error["code"] == "approval_data_invalid"
    assert {e["path"] for e in error["details"]["errors"]} == {"", "times"}


async def test_rejected_hands_the_model_a_refusal() -> None:
    events, server, requests = await approval_run([resolve("rejected")])
    assert server.calls == []
    assert sequence(events) == [
        "tool.requested",
        "approval.requested",
        "approval.resolved",
        "tool.failed",
        "run.completed",
    ]
    assert of_type(events, "tool.failed")[0]["payload"]["error"]["code"] == "tool_rejected"
    tool_message = requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "rejected" in tool_message["content"]


async def test_expired_approval_fails_the_tool_and_the_run_goes_on() -> None:
    events, server, requests = await approval_run([], approval_expires_seconds=0.2)
    assert server.calls == []
    resolved = of_type(events, "approval.resolved")[0]["payload"]
    assert resolved["decision"] == "expired"
    assert of_type(events, "tool.failed")[0]["payload"]["error"]["code"] == "approval_expired"
    assert of_type(events, "run.completed") and len(requests) == 2


async def test_wait_timeout_before_expiry_ends_the_run() -> None:
    events, server, requests = await approval_run([], wait_timeout=0.3, approval_expires_seconds=60)
    assert server.calls == [] and len(requests) == 1
    assert of_type(events, "approval.resolved")[0]["payload"]["decision"] == "expired"
    assert of_type(events, "tool.failed")
    assert of_type(events, "run.failed")[0]["payload"]["error"]["code"] == "wait_timeout"


@pytest.mark.parametrize(
    ("approval", "asked"), [({"echo": "never"}, False), ({"slow": "never"}, True)]
)
async def test_per_tool_policy(approval: dict[str, str], asked: bool) -> None:
    commands = [resolve("approved")] if asked else []
    events, server, _ = await approval_run(commands, approval=approval)
    assert bool(of_type(events, "approval.requested")) is asked
    assert server.calls == [("echo", {"text": "hi", "times": 1})]
