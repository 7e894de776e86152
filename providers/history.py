"""Conversation history handed to providers (protocol.md §11), derived from the AgentState.

``derive_history(state)`` walks ``order`` over every run: user, assistant and system messages
that completed (failed/cancelled assistant messages are kept with the content they have); each
assistant message is followed by its tool calls (``toolCalls: [{id, name, arguments}]``) and,
as ``role: "tool"`` entries, their results (``content`` = the result as JSON text, or the error
message). Tool calls that come before any assistant message of their turn get an assistant
entry with empty content. Reasoning that precedes an assistant entry in the same run is
attached as ``reasoning: [{content, redacted}]``. Tools still pending or running (no result
yet) are left out.

``derive_run_history(events)`` does the same for one run's own events (replayed into a fresh
state), which is how a provider's continuation sees the current run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from core.keys import entity_key
from core.store import AgentStore

__all__ = ["derive_history", "derive_run_history", "replay_events"]

_KEPT_ROLES = ("user", "assistant", "system", "tool", "developer")


def replay_events(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Fold ``events`` into a fresh state in record mode."""
    store = AgentStore()
    for event in events:
        store.dispatch(event)
    return dict(store.get_snapshot())


def _tool_content(tool: Mapping[str, Any]) -> str:
    if tool.get("status") == "completed":
        result = tool.get("result")
        if isinstance(result, str):
            return result
        return orjson.dumps(result).decode() if "result" in tool else ""
    error = tool.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    if tool.get("status") == "cancelled":
        return "The tool call was cancelled."
    return "The tool call failed."


def derive_history(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    assistant: dict[str, Any] | None = None  # the entry that takes the next tool calls
    reasoning: list[dict[str, Any]] = []
    turn_run: str | None = None
    for item in state.get("order", ()):
        kind, ident, run_id = item.get("kind"), item.get("id"), item.get("runId")
        if not isinstance(ident, str) or not isinstance(run_id, str):
            continue
        if run_id != turn_run:
            turn_run, assistant, reasoning = run_id, None, []
        key = entity_key(run_id, ident)
        if kind == "reasoning":
            entity = state.get("reasoning", {}).get(key)
            if entity is not None and entity.get("content"):
                reasoning.append(
                    {"content": entity["content"], "redacted": bool(entity.get("redacted"))}
                )
            continue
        if kind == "message":
            message = state.get("messages", {}).get(key)
            if message is None or message.get("role") not in _KEPT_ROLES:
                continue
            status, role = message.get("status"), message["role"]
            if status != "completed" and not (
                role == "assistant" and status in ("failed", "cancelled")
            ):
                continue
            entry: dict[str, Any] = {"role": role, "content": message.get("content", "")}
            if role == "assistant":
                if reasoning:
                    entry["reasoning"], reasoning = reasoning, []
                assistant = entry
            else:
                assistant = None
            out.append(entry)
            continue
        if kind == "tool":
            tool = state.get("toolCalls", {}).get(key)
            if tool is None or tool.get("status") not in ("completed", "failed", "cancelled"):
                continue
            if assistant is None:
                assistant = {"role": "assistant", "content": ""}
                if reasoning:
                    assistant["reasoning"], reasoning = reasoning, []
                out.append(assistant)
            assistant.setdefault("toolCalls", []).append(
                {"id": ident, "name": tool.get("name", ""), "arguments": tool.get("arguments", "")}
            )
            out.append({"role": "tool", "toolCallId": ident, "content": _tool_content(tool)})
    return out


def derive_run_history(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The history entries of one run's own events."""
    return derive_history(replay_events(events))
