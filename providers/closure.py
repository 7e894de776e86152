"""The closure table of protocol.md §6: what an entity still open gets when the run ends.

``close_entity(entity, cause, error)`` returns the ``(type, payload)`` pairs for one open
entity, or ``None`` when the entity stays open because it waits on the app (flush only).
Causes: ``flush`` (upstream ended normally), ``error``, ``abort``, ``wait_timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Cause", "OpenEntity", "close_entity", "is_waiting"]

Cause = Literal["flush", "error", "abort", "wait_timeout"]

TOOL_INCOMPLETE = {"code": "tool_incomplete", "message": "The tool call did not complete."}
TASK_INCOMPLETE = {"code": "task_incomplete", "message": "The task did not complete."}
TOOL_RESULT_TIMEOUT = {
    "code": "tool_result_timeout",
    "message": "The app did not hand back the tool result in time.",
}
ARTIFACT_CANCELLED = {"code": "cancelled", "message": "The run was cancelled."}
ARTIFACT_WAIT_TIMEOUT = {"code": "wait_timeout", "message": "The run waited on the app too long."}

Step = tuple[str, dict[str, Any]]


@dataclass(slots=True)
class OpenEntity:
    """An entity of the current run that has no terminal event yet."""

    kind: str  # message | reasoning | tool | approval | task | artifact
    id: str
    #: streaming | pending | running | waiting (the reference's statuses)
    status: str
    #: tools only: "app" (handed to the app, §9), "gateway" (an MCP server tool) or "runtime"
    executor: str = "runtime"
    extra: dict[str, Any] = field(default_factory=dict)


def is_waiting(entity: OpenEntity) -> bool:
    """True when the entity waits on the app: an approval, or a tool handed to the app; or on
    the gateway: a server tool (MCP) awaiting its approval or its call's outcome."""
    if entity.kind == "approval":
        return True
    if entity.kind == "tool" and entity.executor == "gateway":
        return True
    return entity.kind == "tool" and entity.executor == "app" and entity.status == "running"


def close_entity(
    entity: OpenEntity, cause: Cause, error: dict[str, Any], reason: str = "aborted"
) -> list[Step] | None:
    """The events closing ``entity`` for ``cause``; ``None`` = leave it open (it waits).

    ``error`` is the run's error (cause ``error``), ``reason`` the abort reason."""
    key = {
        "message": "messageId",
        "reasoning": "reasoningId",
        "tool": "toolCallId",
        "approval": "approvalId",
        "task": "taskId",
        "artifact": "artifactId",
    }[entity.kind]
    ident = {key: entity.id}
    kind = entity.kind
    if kind == "approval":
        if cause == "flush":
            return None
        return [("approval.resolved", {**ident, "decision": "expired"})]
    if cause == "abort":
        if kind == "artifact":
            return [("artifact.failed", {**ident, "error": ARTIFACT_CANCELLED})]
        return [(f"{kind}.cancelled", {**ident, "reason": reason})]
    if cause == "error":
        return [(f"{kind}.failed", {**ident, "error": error})]
    if cause == "wait_timeout":
        if kind == "tool" and entity.executor == "app" and entity.status == "running":
            return [("tool.failed", {**ident, "error": TOOL_RESULT_TIMEOUT})]
        if kind == "task":
            return [("task.cancelled", {**ident, "reason": "wait_timeout"})]
        if kind == "artifact":
            return [("artifact.failed", {**ident, "error": ARTIFACT_WAIT_TIMEOUT})]
        return [(f"{kind}.failed", {**ident, "error": error})]
    # flush: the upstream ended normally
    if kind in ("message", "reasoning", "artifact"):
        return [(f"{kind}.completed", ident)]
    if kind == "task":
        return [("task.failed", {**ident, "error": TASK_INCOMPLETE})]
    # tool
    if entity.executor == "gateway":
        return None  # the gateway runs it: its outcome comes as a command
    if entity.executor == "app":
        if entity.status == "running":
            return None
        return [("tool.running", ident)]  # arguments complete: hand it to the app and wait
    return [("tool.failed", {**ident, "error": TOOL_INCOMPLETE})]
