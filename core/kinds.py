"""Entity kinds: which state map, id field and start event belong to each kind."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ENTITY_KINDS",
    "ENTITY_MAPS",
    "EVENT_ENTITY_KIND",
    "ID_FIELDS",
    "KIND_ALIASES",
    "START_STATUSES",
    "START_TYPES",
    "TERMINAL_STATUSES",
]

#: kind -> key of its map in AgentState (``order`` entries use the kind).
ENTITY_MAPS: Final[dict[str, str]] = {
    "message": "messages",
    "reasoning": "reasoning",
    "tool": "toolCalls",
    "approval": "approvals",
    "task": "tasks",
    "artifact": "artifacts",
}
ENTITY_KINDS: Final[tuple[str, ...]] = tuple(ENTITY_MAPS)

#: kind -> payload field that carries the entity id.
ID_FIELDS: Final[dict[str, str]] = {
    "message": "messageId",
    "reasoning": "reasoningId",
    "tool": "toolCallId",
    "approval": "approvalId",
    "task": "taskId",
    "artifact": "artifactId",
}

#: Accepted spellings of a kind in read helpers (the kind, its state-map name, "toolCall").
KIND_ALIASES: Final[dict[str, str]] = {
    **{kind: kind for kind in ENTITY_MAPS},
    **{map_name: kind for kind, map_name in ENTITY_MAPS.items()},
    "toolCall": "tool",
}

#: start event type -> the kind of entity it opens.
START_TYPES: Final[dict[str, str]] = {
    "message.started": "message",
    "reasoning.started": "reasoning",
    "tool.requested": "tool",
    "approval.requested": "approval",
    "task.created": "task",
    "artifact.created": "artifact",
}

#: kind -> the status an entity has when its start event opens it.
START_STATUSES: Final[dict[str, str]] = {
    "message": "streaming",
    "reasoning": "streaming",
    "tool": "pending",
    "approval": "waiting",
    "task": "pending",
    "artifact": "streaming",
}

#: event type -> entity kind, for every entity event (starts and follow-ups).
EVENT_ENTITY_KIND: Final[dict[str, str]] = {
    **START_TYPES,
    **{f"message.{s}": "message" for s in ("delta", "completed", "failed", "cancelled")},
    **{f"reasoning.{s}": "reasoning" for s in ("delta", "completed", "failed", "cancelled")},
    **{
        f"tool.{s}": "tool"
        for s in ("arguments_delta", "running", "completed", "failed", "cancelled")
    },
    "approval.resolved": "approval",
    **{f"task.{s}": "task" for s in ("updated", "completed", "failed", "cancelled")},
    **{f"artifact.{s}": "artifact" for s in ("updated", "completed", "failed")},
}

TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})
