"""JSON Schema of the AgentEvent union (committed as ``openapi/agent-event.schema.json``)."""

from __future__ import annotations

import json
from typing import Any

from core.models import event_adapter

__all__ = ["SCHEMA_ID", "agent_event_json_schema", "agent_event_json_schema_text"]

SCHEMA_ID = "https://agent-event-gateway.local/schemas/agent-event-0.1.json"


def agent_event_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one AgentEvent (wire form, camelCase)."""
    schema = _absent_not_null(event_adapter().json_schema(by_alias=True, mode="validation"))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "AgentEvent",
        "description": (
            "Agent Event protocol 0.1 envelope (discriminated on `type`). Rules JSON Schema "
            "cannot express (finite numbers, JavaScript integers) are in spec/protocol.md."
        ),
        **schema,
    }


def _absent_not_null(node: Any) -> Any:
    """Optional fields may be absent but never ``null`` on the wire: drop the null branch.

    Pydantic renders ``x: str | None = None`` as ``anyOf [string, null]`` with ``default: null``.
    """
    if isinstance(node, list):
        return [_absent_not_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _absent_not_null(value) for key, value in node.items()}
    branches = out.get("anyOf")
    if "default" in out and out["default"] is None and isinstance(branches, list):
        kept = [branch for branch in branches if branch != {"type": "null"}]
        if len(kept) < len(branches):
            del out["default"]
            del out["anyOf"]
            if len(kept) == 1:
                out.update(kept[0])
            else:
                out["anyOf"] = kept
    return out


def agent_event_json_schema_text() -> str:
    """The schema as the committed file's text (sorted keys, 2-space indent, final newline)."""
    return json.dumps(agent_event_json_schema(), indent=2, sort_keys=True) + "\n"
