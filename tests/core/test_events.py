"""Validity rules of protocol.md §1-2/§9 and "Details that decide agreement" (events.ts)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import (
    EVENT_TYPES,
    RUN_TERMINAL_TYPES,
    EventValidationError,
    dump_event,
    is_agent_event,
    parse_event,
    validate_event,
)
from core.events import _validate, _validate_general
from core.models import EVENT_MODELS
from tests.core.strategies import ENVELOPE_KEYS, any_streams, delta_streams

HUGE_INT = 10**400  # Infinity in JavaScript
ERROR = {"message": "boom"}

#: One minimal valid payload per type.
VALID_PAYLOADS: dict[str, dict[str, Any]] = {
    "session.started": {},
    "run.started": {},
    "run.completed": {},
    "run.failed": {"error": ERROR},
    "run.cancelled": {},
    "message.started": {"messageId": "m", "role": "assistant"},
    "message.delta": {"messageId": "m", "delta": "x"},
    "message.completed": {"messageId": "m"},
    "message.failed": {"messageId": "m", "error": ERROR},
    "message.cancelled": {"messageId": "m"},
    "reasoning.started": {"reasoningId": "r"},
    "reasoning.delta": {"reasoningId": "r", "delta": "x"},
    "reasoning.completed": {"reasoningId": "r"},
    "reasoning.failed": {"reasoningId": "r", "error": ERROR},
    "reasoning.cancelled": {"reasoningId": "r"},
    "tool.requested": {"toolCallId": "t", "name": "n"},
    "tool.arguments_delta": {"toolCallId": "t", "delta": ""},
    "tool.running": {"toolCallId": "t"},
    "tool.completed": {"toolCallId": "t"},
    "tool.failed": {"toolCallId": "t", "error": ERROR},
    "tool.cancelled": {"toolCallId": "t"},
    "approval.requested": {"approvalId": "a"},
    "approval.resolved": {"approvalId": "a", "decision": "expired"},
    "task.created": {"taskId": "k", "title": "T"},
    "task.updated": {"taskId": "k"},
    "task.completed": {"taskId": "k"},
    "task.failed": {"taskId": "k", "error": ERROR},
    "task.cancelled": {"taskId": "k"},
    "artifact.created": {"artifactId": "f", "name": "file"},
    "artifact.updated": {"artifactId": "f", "content": None},
    "artifact.completed": {"artifactId": "f"},
    "artifact.failed": {"artifactId": "f", "error": ERROR},
}


def envelope(
    etype: str = "run.started", payload: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "protocolVersion": "0.1",
        "type": etype,
        "eventId": "e",
        "sessionId": "s",
        "runId": "r",
        "sequence": 0,
        "timestamp": 1.5,
        "payload": VALID_PAYLOADS[etype] if payload is None else payload,
    }
    event.update(extra)
    return event


def test_there_are_32_types() -> None:
    assert len(EVENT_TYPES) == 32 == len(VALID_PAYLOADS) == len(EVENT_MODELS)
    assert set(VALID_PAYLOADS) == EVENT_TYPES
    assert RUN_TERMINAL_TYPES == {"run.completed", "run.failed", "run.cancelled"}


@pytest.mark.parametrize("etype", sorted(VALID_PAYLOADS))
def test_minimal_payloads_are_valid_and_parse(etype: str) -> None:
    event = envelope(etype)
    assert validate_event(event) is None
    model = parse_event(event)
    assert model.type == etype  # type: ignore[attr-defined]
    assert dump_event(model) == event


@pytest.mark.parametrize("etype", sorted(t for t in VALID_PAYLOADS if VALID_PAYLOADS[t]))
def test_each_required_field_is_required(etype: str) -> None:
    for key in VALID_PAYLOADS[etype]:
        payload = dict(VALID_PAYLOADS[etype])
        del payload[key]
        error = validate_event(envelope(etype, payload))
        assert error is not None, (etype, key)
        assert error.path == f"$.payload.{key}"


ENVELOPE_CASES: list[tuple[str, Any, bool]] = [
    ("protocolVersion", "0.2", False),
    ("protocolVersion", 0.1, False),
    ("type", "unknown.event", False),
    ("type", ["run.started"], False),
    ("type", None, False),
    ("eventId", "", False),
    ("eventId", 1, False),
    ("sessionId", "", False),
    ("runId", "", False),
    ("runId", None, False),
    ("sequence", 3.0, True),
    ("sequence", 2**60, True),
    ("sequence", -1, False),
    ("sequence", 1.5, False),
    ("sequence", True, False),
    ("sequence", "1", False),
    ("sequence", HUGE_INT, False),
    ("sequence", float("inf"), False),
    ("sequence", float("nan"), False),
    ("timestamp", 0, True),
    ("timestamp", -5.25, True),
    ("timestamp", 10**300, True),
    ("timestamp", HUGE_INT, False),
    ("timestamp", -HUGE_INT, False),
    ("timestamp", 2**1024 - 2**970, False),
    ("timestamp", 2**1024 - 2**970 - 1, True),
    ("timestamp", float("inf"), False),
    ("timestamp", float("nan"), False),
    ("timestamp", False, False),
    ("timestamp", None, False),
    ("timestamp", "1", False),
    ("parentId", "", True),
    ("parentId", "p", True),
    ("parentId", None, False),
    ("parentId", 1, False),
    ("payload", None, False),
    ("payload", [], False),
    ("payload", "x", False),
    ("meta", {}, True),
    ("meta", {"any": [1, None]}, True),
    ("meta", None, False),
    ("meta", [], False),
]


@pytest.mark.parametrize(("key", "value", "valid"), ENVELOPE_CASES)
def test_envelope_rules(key: str, value: Any, valid: bool) -> None:
    event = envelope()
    event[key] = value
    error = validate_event(event)
    assert (error is None) is valid
    if not valid:
        assert error is not None and error.path == f"$.{key}"
        with pytest.raises(EventValidationError) as info:
            parse_event(event)
        assert info.value.path == f"$.{key}" and info.value.reason


@pytest.mark.parametrize("data", [None, [], "x", 1, True, {}])
def test_non_events(data: Any) -> None:
    assert not is_agent_event(data)
    error = validate_event(data)
    assert error is not None and error.path in ("$", "$.protocolVersion")


PAYLOAD_CASES: list[tuple[str, dict[str, Any], bool, str]] = [
    # session / run
    ("session.started", {"title": ""}, True, ""),
    ("session.started", {"title": None}, False, "title"),
    ("run.started", {"input": None, "anything": 1}, True, ""),
    ("run.completed", {"usage": {"a": 1, "b": 2.5}}, True, ""),
    ("run.completed", {"usage": {}}, True, ""),
    ("run.completed", {"usage": {"a": True}}, False, "usage.a"),
    ("run.completed", {"usage": {"a": HUGE_INT}}, False, "usage.a"),
    ("run.completed", {"usage": {"a": None}}, False, "usage.a"),
    ("run.completed", {"usage": None}, False, "usage"),
    ("run.completed", {"usage": [1]}, False, "usage"),
    ("run.completed", {"output": None}, True, ""),
    ("run.failed", {"error": {"message": ""}}, False, "error.message"),
    ("run.failed", {"error": "boom"}, False, "error"),
    ("run.failed", {"error": {"message": "m", "code": None}}, False, "error.code"),
    ("run.failed", {"error": {"message": "m", "code": ""}}, True, ""),
    ("run.failed", {"error": {"message": "m", "retryable": 1}}, False, "error.retryable"),
    ("run.failed", {"error": {"message": "m", "retryable": False, "details": None}}, True, ""),
    ("run.cancelled", {"reason": None}, False, "reason"),
    ("run.cancelled", {"reason": ""}, True, ""),
    # messages
    ("message.started", {"messageId": "m", "role": ""}, False, "role"),
    ("message.started", {"messageId": "", "role": "user"}, False, "messageId"),
    ("message.started", {"messageId": "m", "role": "user", "content": None}, False, "content"),
    ("message.started", {"messageId": "m", "role": "user", "content": []}, True, ""),
    ("message.delta", {"messageId": "m", "delta": ""}, True, ""),
    ("message.delta", {"messageId": "m", "delta": None}, False, "delta"),
    ("message.delta", {"messageId": "m", "delta": 1}, False, "delta"),
    ("message.delta", {"messageId": "m", "delta": [{"type": "text"}]}, False, "delta[0].text"),
    ("message.delta", {"messageId": "m", "delta": [{"type": "text", "text": ""}]}, True, ""),
    ("message.delta", {"messageId": "m", "delta": ["x"]}, False, "delta[0]"),
    ("message.delta", {"messageId": "m", "delta": [{"type": ""}]}, False, "delta[0].type"),
    ("message.delta", {"messageId": "m", "delta": [{"text": "x"}]}, False, "delta[0].type"),
    ("message.delta", {"messageId": "m", "delta": [{"type": "image"}]}, True, ""),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "image", "data": None, "name": 5}]},
        True,
        "",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "image", "url": None}]},
        False,
        "delta[0].url",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "image", "mediaType": 1}]},
        False,
        "delta[0].mediaType",
    ),
    ("message.delta", {"messageId": "m", "delta": [{"type": "file", "name": "a"}]}, True, ""),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "file", "name": None}]},
        False,
        "delta[0].name",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "agui.state", "data": None}]},
        True,
        "",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "agui.state"}]},
        False,
        "delta[0].data",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "custom", "data": 1}]},
        False,
        "delta[0].type",
    ),
    (
        "message.delta",
        {"messageId": "m", "delta": [{"type": "text", "text": "a"}, {"type": "x"}]},
        False,
        "delta[1].type",
    ),
    ("message.completed", {"messageId": "m", "content": "x"}, True, ""),
    ("message.completed", {"messageId": "m", "content": {}}, False, "content"),
    ("message.failed", {"messageId": "m", "error": None}, False, "error"),
    ("message.cancelled", {"messageId": "m", "reason": 1}, False, "reason"),
    # reasoning
    ("reasoning.started", {"reasoningId": "r", "redacted": True}, True, ""),
    ("reasoning.started", {"reasoningId": "r", "redacted": None}, False, "redacted"),
    ("reasoning.started", {"reasoningId": "r", "redacted": 1}, False, "redacted"),
    ("reasoning.delta", {"reasoningId": "r", "delta": ["x"]}, False, "delta"),
    ("reasoning.completed", {"reasoningId": "r", "content": "", "summary": ""}, True, ""),
    ("reasoning.completed", {"reasoningId": "r", "summary": None}, False, "summary"),
    ("reasoning.completed", {"reasoningId": "r", "content": None}, False, "content"),
    # tools
    ("tool.requested", {"toolCallId": "t", "name": ""}, False, "name"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "arguments": None}, False, "arguments"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": 3.0}, True, ""),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": -2}, True, ""),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": 0.5}, False, "index"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": True}, False, "index"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": None}, False, "index"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "index": HUGE_INT}, False, "index"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "attempt": 1}, True, ""),
    ("tool.requested", {"toolCallId": "t", "name": "n", "attempt": 2.0}, True, ""),
    ("tool.requested", {"toolCallId": "t", "name": "n", "attempt": 0}, False, "attempt"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "attempt": True}, False, "attempt"),
    ("tool.requested", {"toolCallId": "t", "name": "n", "retryOf": ""}, True, ""),
    ("tool.requested", {"toolCallId": "t", "name": "n", "retryOf": None}, False, "retryOf"),
    ("tool.arguments_delta", {"toolCallId": "t", "delta": None}, False, "delta"),
    ("tool.completed", {"toolCallId": "t", "result": None}, True, ""),
    ("tool.running", {"toolCallId": 1}, False, "toolCallId"),
    # approvals
    (
        "approval.requested",
        {
            "approvalId": "a",
            "toolCallId": "",
            "description": "",
            "risk": "custom",
            "data": None,
            "editable": False,
            "expiresAt": 1.5,
            "version": "v",
        },
        True,
        "",
    ),
    ("approval.requested", {"approvalId": "a", "version": 3}, True, ""),
    ("approval.requested", {"approvalId": "a", "version": True}, False, "version"),
    ("approval.requested", {"approvalId": "a", "version": None}, False, "version"),
    ("approval.requested", {"approvalId": "a", "version": float("nan")}, False, "version"),
    ("approval.requested", {"approvalId": "a", "expiresAt": HUGE_INT}, False, "expiresAt"),
    ("approval.requested", {"approvalId": "a", "expiresAt": None}, False, "expiresAt"),
    ("approval.requested", {"approvalId": "a", "editable": "yes"}, False, "editable"),
    ("approval.requested", {"approvalId": "a", "risk": None}, False, "risk"),
    ("approval.requested", {"approvalId": "a", "toolCallId": None}, False, "toolCallId"),
    ("approval.requested", {"approvalId": "a", "description": 1}, False, "description"),
    ("approval.resolved", {"approvalId": "a", "decision": "maybe"}, False, "decision"),
    ("approval.resolved", {"approvalId": "a", "decision": ["approved"]}, False, "decision"),
    ("approval.resolved", {"approvalId": "a", "decision": "modified", "data": None}, True, ""),
    # tasks
    ("task.created", {"taskId": "k", "title": ""}, False, "title"),
    ("task.created", {"taskId": "k", "title": "T", "description": None}, False, "description"),
    ("task.updated", {"taskId": "k", "title": "", "description": "", "progress": 0}, True, ""),
    ("task.updated", {"taskId": "k", "progress": None}, False, "progress"),
    ("task.updated", {"taskId": "k", "progress": True}, False, "progress"),
    ("task.updated", {"taskId": "k", "progress": float("inf")}, False, "progress"),
    ("task.updated", {"taskId": "k", "title": None}, False, "title"),
    ("task.completed", {"taskId": "k", "result": None}, True, ""),
    ("task.cancelled", {"taskId": "k", "reason": None}, False, "reason"),
    # artifacts
    ("artifact.created", {"artifactId": "f", "name": ""}, False, "name"),
    ("artifact.created", {"artifactId": "f", "name": "n", "mediaType": None}, False, "mediaType"),
    ("artifact.created", {"artifactId": "f", "name": "n", "content": None}, True, ""),
    ("artifact.updated", {"artifactId": "f", "content": 1, "version": None}, True, ""),
    ("artifact.updated", {"artifactId": "f", "content": 1, "version": [1]}, True, ""),
    ("artifact.completed", {"artifactId": "f", "content": None, "version": True}, True, ""),
    (
        "artifact.failed",
        {"artifactId": "f", "error": {"message": "m", "code": 1}},
        False,
        "error.code",
    ),
]


@pytest.mark.parametrize(("etype", "payload", "valid", "where"), PAYLOAD_CASES)
def test_payload_rules(etype: str, payload: dict[str, Any], valid: bool, where: str) -> None:
    event = envelope(etype, payload)
    error = validate_event(event)
    assert (error is None) is valid, error
    if valid:
        model = parse_event(event)
        assert dump_event(model) == event
    else:
        assert error is not None
        assert error.path == f"$.payload.{where}" if not where.startswith("[") else True
        assert error.to_dict() == {"path": error.path, "reason": error.reason}
        assert str(error) == f"{error.path}: {error.reason}"


def test_validate_never_raises_on_odd_input() -> None:
    class Weird(dict[str, Any]):
        def get(self, *args: Any) -> Any:
            raise RuntimeError("odd")

    error = validate_event(Weird())
    assert error is not None and error.path == "$"


def test_meta_extras_and_payload_extras_survive_a_round_trip() -> None:
    event = envelope(
        "message.delta",
        {"messageId": "m", "delta": [{"type": "text", "text": "x", "extra": 1}], "more": [1]},
        parentId="p",
        meta={"provider": "openai", "upstream": {"id": "u"}, "x-unknown": None},
        extraEnvelopeKey=True,
    )
    model = parse_event(copy.deepcopy(event))
    assert model.meta == event["meta"]
    assert model.parent_id == "p"  # snake_case in Python
    dumped = dump_event(model)
    assert dumped == event
    assert json.loads(json.dumps(dumped)) == event


def test_parse_event_by_type_and_snake_case_fields() -> None:
    event = envelope(
        "tool.requested",
        {"toolCallId": "t", "name": "n", "attempt": 2, "retryOf": "t0", "index": 0},
    )
    model: Any = parse_event(event)
    assert type(model).__name__ == "ToolRequestedEvent"
    assert model.payload.tool_call_id == "t" and model.payload.retry_of == "t0"
    assert model.event_id == "e" and model.session_id == "s" and model.run_id == "r"
    assert dump_event(model) == event


def test_numbers_keep_their_json_type_in_models() -> None:
    event = envelope("run.completed", {"usage": {"inputTokens": 10, "cost": 0.5}}, timestamp=100)
    dumped = dump_event(parse_event(event))
    assert dumped["payload"]["usage"] == {"inputTokens": 10, "cost": 0.5}
    assert isinstance(dumped["payload"]["usage"]["inputTokens"], int)
    assert isinstance(dumped["timestamp"], int)


class _Str(str):
    pass


class _Dict(dict[str, Any]):
    pass


ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    3.0,
    2.5,
    float("inf"),
    float("nan"),
    2**1024,
    -(2**1024),
    "",
    "x",
    _Str("y"),
    [],
    {},
    _Dict(),
    {"messageId": "m", "delta": "d"},
    _Dict({"messageId": "m", "delta": "d"}),
    "0.1",
]
_ODD_VALUES = st.sampled_from(ODD_VALUES)
_ENVELOPE_KEYS = st.sampled_from(ENVELOPE_KEYS)
_PAYLOAD_KEYS = st.sampled_from(["messageId", "reasoningId", "toolCallId", "delta", "role"])


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(any_streams(max_size=12), delta_streams(max_steps=8)),
    st.lists(st.tuples(st.booleans(), _ENVELOPE_KEYS, _PAYLOAD_KEYS, _ODD_VALUES), max_size=3),
)
def test_fast_acceptance_agrees_with_the_general_check(
    events: list[Any], edits: list[tuple[bool, str, str, Any]]
) -> None:
    """``_validate`` accepts the common shape in one expression; for any event, edited or not,
    it reports exactly what the general check (every rule in order) reports."""
    for event in events:
        candidates = [event]
        if isinstance(event, dict):
            edited = dict(event)
            for in_payload, key, payload_key, value in edits:
                if in_payload and isinstance(edited.get("payload"), dict):
                    edited["payload"] = {**edited["payload"], payload_key: value}
                elif value is None:
                    edited.pop(key, None)
                else:
                    edited[key] = value
            candidates.append(edited)
        for candidate in candidates:
            fast, general = _validate(candidate), _validate_general(candidate)
            assert (fast is None) == (general is None)
            if fast is not None and general is not None:
                assert (fast.path, fast.reason) == (general.path, general.reason)


def _same_verdict(candidate: Any) -> None:
    fast, general = _validate(candidate), _validate_general(candidate)
    assert (fast is None) == (general is None), candidate
    if fast is not None and general is not None:
        assert (fast.path, fast.reason) == (general.path, general.reason)


@pytest.mark.parametrize("etype", ["message.delta", "reasoning.delta", "message.started"])
def test_fast_acceptance_agrees_on_every_odd_value_of_every_field(etype: str) -> None:
    id_field = "reasoningId" if etype.startswith("reasoning") else "messageId"
    base = {
        **envelope(etype),
        "payload": {id_field: "m", "delta": "d", "role": "assistant"},
        "parentId": "p",
        "meta": {"k": 1},
    }
    _same_verdict(base)
    assert _validate(base) is None
    for value in ODD_VALUES:
        for key in [*base, "absent"]:
            _same_verdict({**base, key: value})
            _same_verdict({k: v for k, v in base.items() if k != key})
        for key in [id_field, "delta", "role"]:
            _same_verdict({**base, "payload": {**base["payload"], key: value}})
