"""Message projection and selectors (protocol.md §8; ``x-chat/agentRuntime.ts``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.keys import entity_key

__all__ = ["is_requesting", "message_status", "project_messages"]


def message_status(message: Mapping[str, Any]) -> str:
    """useXChat status of one message state: error, abort, local, success or updating."""
    status = message.get("status")
    if status == "failed":
        return "error"
    if status == "cancelled":
        return "abort"
    if message.get("role") == "user":
        return "local"
    if status == "completed":
        return "success"
    return "updating"


def project_messages(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{id: entityKey(runId, id), message, status}]`` for every message, in ``order``."""
    messages: Mapping[str, Any] = state["messages"]
    projected: list[dict[str, Any]] = []
    for ref in state["order"]:
        if ref.get("kind") != "message":
            continue
        key = entity_key(ref["runId"], ref["id"])
        message = messages.get(key)
        if message is None:
            continue
        projected.append({"id": key, "message": message, "status": message_status(message)})
    return projected


def is_requesting(state: Mapping[str, Any]) -> bool:
    """True while any run is ``running``."""
    return any(run.get("status") == "running" for run in state["runs"].values())
