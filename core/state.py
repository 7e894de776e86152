"""The AgentState shape (protocol.md §3): plain JSON data, keyed by ``entity_key``."""

from __future__ import annotations

from typing import Any

__all__ = ["STATE_KEYS", "AgentState", "create_agent_state"]

#: An AgentState is plain JSON data; see protocol.md §3 for its keys.
AgentState = dict[str, Any]

STATE_KEYS: tuple[str, ...] = (
    "sessions",
    "runs",
    "messages",
    "reasoning",
    "toolCalls",
    "approvals",
    "tasks",
    "artifacts",
    "order",
    "issues",
    "processedEventIds",
    "lastSequenceByRun",
)


def create_agent_state() -> AgentState:
    """``createInitialAgentState()``: every map empty."""
    return {
        "sessions": {},
        "runs": {},
        "messages": {},
        "reasoning": {},
        "toolCalls": {},
        "approvals": {},
        "tasks": {},
        "artifacts": {},
        "order": [],
        "issues": [],
        "processedEventIds": {},
        "lastSequenceByRun": {},
    }
