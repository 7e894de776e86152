"""Shared helpers for replaying recorded upstream streams through a provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from core.keys import entity_key
from providers.contract import AgentEvent, Command
from providers.history import replay_events
from providers.recorded import parse_sse_text

#: The recorded upstream streams, copied into the repository (attribution in its README).
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def frames_to_chunks(frames: Sequence[str]) -> list[Any]:
    return list(parse_sse_text("".join(frames)))


def waiting_app_tools(events: Sequence[AgentEvent]) -> list[str]:
    """Tool ids handed to the app (``tool.running``, ``meta.executor == "app"``) with no result."""
    app = {
        e["payload"]["toolCallId"]
        for e in events
        if e["type"] == "tool.requested" and (e.get("meta") or {}).get("executor") == "app"
    }
    running = [
        e["payload"]["toolCallId"]
        for e in events
        if e["type"] == "tool.running" and e["payload"]["toolCallId"] in app
    ]
    done = {
        e["payload"]["toolCallId"]
        for e in events
        if e["type"] in ("tool.completed", "tool.failed", "tool.cancelled")
    }
    return [t for t in running if t not in done]


def submit_next_tool(result: Any = "ok") -> Any:
    """A lazy command: submit ``result`` for the first tool still waiting on the app."""

    def make(events: list[AgentEvent]) -> Command:
        waiting = waiting_app_tools(events)
        assert waiting, "no tool waits on the app"
        return Command("tool.submit_result", {"toolCallId": waiting[0], "result": result})

    return make


def final_state(events: Sequence[AgentEvent]) -> dict[str, Any]:
    return replay_events(events)


def assistant_texts(events: Sequence[AgentEvent]) -> list[Any]:
    state = final_state(events)
    out = []
    for item in state["order"]:
        if item["kind"] != "message":
            continue
        message = state["messages"][entity_key(item["runId"], item["id"])]
        if message["role"] == "assistant":
            out.append(message["content"])
    return out


def tool_calls(events: Sequence[AgentEvent]) -> list[tuple[str, Any, str]]:
    """(name, parsed arguments or the raw text, status) of every tool, in order."""
    state = final_state(events)
    out = []
    for item in state["order"]:
        if item["kind"] != "tool":
            continue
        tool = state["toolCalls"][entity_key(item["runId"], item["id"])]
        try:
            args: Any = orjson.loads(tool["arguments"]) if tool["arguments"] else None
        except orjson.JSONDecodeError:
            args = tool["arguments"]
        out.append((tool["name"], args, tool["status"]))
    return out


def reasoning_texts(events: Sequence[AgentEvent]) -> list[str]:
    state = final_state(events)
    return [
        state["reasoning"][entity_key(i["runId"], i["id"])]["content"]
        for i in state["order"]
        if i["kind"] == "reasoning"
    ]


def terminal(events: Sequence[AgentEvent]) -> Mapping[str, Any]:
    assert events[-1]["type"].startswith("run.")
    return events[-1]
