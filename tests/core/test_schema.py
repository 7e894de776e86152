"""The committed JSON Schema must equal what ``core.schema`` generates."""

from __future__ import annotations

import json
from pathlib import Path

from core.schema import agent_event_json_schema, agent_event_json_schema_text

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "openapi" / "agent-event.schema.json"


def test_committed_schema_is_fresh() -> None:
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    assert committed == agent_event_json_schema_text(), (
        "openapi/agent-event.schema.json is stale; regenerate it with "
        "`python -c 'from core.schema import agent_event_json_schema_text as t; "
        'open("openapi/agent-event.schema.json","w").write(t())\'`'
    )


def test_schema_shape() -> None:
    schema = agent_event_json_schema()
    assert schema["$schema"].endswith("2020-12/schema")
    assert schema["discriminator"]["propertyName"] == "type"
    assert len(schema["oneOf"]) == 32
    delta = schema["$defs"]["MessageDeltaEvent"]
    assert delta["properties"]["type"]["const"] == "message.delta"
    assert delta["properties"]["sequence"] == {"minimum": 0, "title": "Sequence", "type": "integer"}
    # Optional means "may be absent", never null.
    assert delta["properties"]["parentId"] == {"title": "Parentid", "type": "string"}
    assert set(delta["required"]) >= {"protocolVersion", "eventId", "payload", "type"}
    text = json.dumps(schema)
    assert '{"type": "null"}' not in text
    assert schema["$defs"]["ArtifactUpdatedPayload"]["required"] == ["artifactId", "content"]
