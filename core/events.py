"""Agent Event protocol 0.1: event types and the validity rules (protocol.md §1-2, §9).

``validate_event`` is the hand-written, allocation-free check used on hot paths; it mirrors
``isAgentEvent`` of the reference (``agent/protocol/events.ts``) including its JavaScript number
and non-empty-string rules, and never raises. ``parse_event`` adds the pydantic model on top.
Events otherwise travel as plain wire-form dicts (camelCase).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from core.jsnum import is_js_finite, is_js_integer
from core.runs import RUN_TERMINAL_TYPES

if TYPE_CHECKING:
    from core.models import AgentEvent

__all__ = [
    "APPROVAL_DECISIONS",
    "EVENT_TYPES",
    "PROTOCOL_VERSION",
    "RUN_TERMINAL_TYPES",
    "EventValidationError",
    "is_agent_event",
    "parse_event",
    "validate_event",
]

PROTOCOL_VERSION: Final = "0.1"

#: The 32 event types, in the reference's order.
EVENT_TYPE_LIST: Final[tuple[str, ...]] = (
    "session.started",
    "run.started",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "message.started",
    "message.delta",
    "message.completed",
    "message.failed",
    "message.cancelled",
    "reasoning.started",
    "reasoning.delta",
    "reasoning.completed",
    "reasoning.failed",
    "reasoning.cancelled",
    "tool.requested",
    "tool.arguments_delta",
    "tool.running",
    "tool.completed",
    "tool.failed",
    "tool.cancelled",
    "approval.requested",
    "approval.resolved",
    "task.created",
    "task.updated",
    "task.completed",
    "task.failed",
    "task.cancelled",
    "artifact.created",
    "artifact.updated",
    "artifact.completed",
    "artifact.failed",
)
EVENT_TYPES: Final[frozenset[str]] = frozenset(EVENT_TYPE_LIST)
APPROVAL_DECISIONS: Final[frozenset[str]] = frozenset(
    {"approved", "rejected", "modified", "expired"}
)


class EventValidationError(ValueError):
    """An event (or candidate event) that is not a valid AgentEvent.

    ``path`` is a JSON path (``$.payload.messageId``), ``reason`` says what is wrong there.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


_NON_EMPTY = "must be a non-empty string"
_OPT_STR = "must be a string when present"
_OBJECT = "must be an object"

# A payload check returns None or (path below $.payload, reason).
_Problem = tuple[str, str] | None
_Check = Callable[[dict[str, Any]], _Problem]


def _opt_str(p: dict[str, Any], key: str) -> _Problem:
    if key in p and not isinstance(p[key], str):
        return (f".{key}", _OPT_STR)
    return None


def _req_str(p: dict[str, Any], key: str) -> _Problem:
    v = p.get(key)
    if isinstance(v, str) and v:
        return None
    return (f".{key}", _NON_EMPTY)


def _error_problem(value: object, where: str) -> _Problem:
    if not isinstance(value, dict):
        return (where, "must be an AgentError object")
    m = value.get("message")
    if not (isinstance(m, str) and m):
        return (f"{where}.message", _NON_EMPTY)
    if "code" in value and not isinstance(value["code"], str):
        return (f"{where}.code", _OPT_STR)
    if "retryable" in value and not isinstance(value["retryable"], bool):
        return (f"{where}.retryable", "must be a boolean when present")
    return None


def _req_error(p: dict[str, Any]) -> _Problem:
    return _error_problem(p.get("error"), ".error")


def _content_problem(value: object, where: str) -> _Problem:
    if isinstance(value, str):
        return None
    if not isinstance(value, list):
        return (where, "must be a string or an array of content parts")
    for i, part in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(part, dict):
            return (at, "must be a content part object")
        ptype = part.get("type")
        if not (isinstance(ptype, str) and ptype):
            return (f"{at}.type", _NON_EMPTY)
        if ptype == "text":
            if not isinstance(part.get("text"), str):
                return (f"{at}.text", "must be a string")
        elif ptype == "image":
            for key in ("url", "mediaType"):
                if key in part and not isinstance(part[key], str):
                    return (f"{at}.{key}", _OPT_STR)
        elif ptype == "file":
            for key in ("url", "mediaType", "name"):
                if key in part and not isinstance(part[key], str):
                    return (f"{at}.{key}", _OPT_STR)
        elif "." not in ptype:
            return (f"{at}.type", "must be text, image, file or a namespaced '<ns>.<name>' type")
        elif "data" not in part:
            return (f"{at}.data", "is required for a namespaced content part")
    return None


def _opt_content(p: dict[str, Any], key: str) -> _Problem:
    if key in p:
        return _content_problem(p[key], f".{key}")
    return None


def _opt_bool(p: dict[str, Any], key: str) -> _Problem:
    if key in p and not isinstance(p[key], bool):
        return (f".{key}", "must be a boolean when present")
    return None


def _opt_finite(p: dict[str, Any], key: str) -> _Problem:
    if key in p and not is_js_finite(p[key]):
        return (f".{key}", "must be a finite number when present")
    return None


def _first(*problems: _Problem) -> _Problem:
    for problem in problems:
        if problem is not None:
            return problem
    return None


# --- payload checks, one per type -------------------------------------------------------------


def _session_started(p: dict[str, Any]) -> _Problem:
    return _opt_str(p, "title")


def _run_started(p: dict[str, Any]) -> _Problem:
    return None


def _run_completed(p: dict[str, Any]) -> _Problem:
    if "usage" not in p:
        return None
    usage = p["usage"]
    if not isinstance(usage, dict):
        return (".usage", "must be an object of finite numbers when present")
    for key, value in usage.items():
        if not is_js_finite(value):
            return (f".usage.{key}", "must be a finite number")
    return None


def _with_error(p: dict[str, Any]) -> _Problem:
    return _req_error(p)


def _with_reason(p: dict[str, Any]) -> _Problem:
    return _opt_str(p, "reason")


def _id_then(key: str, rest: _Check | None) -> _Check:
    if rest is None:

        def check_id(p: dict[str, Any]) -> _Problem:
            v = p.get(key)
            if isinstance(v, str) and v:
                return None
            return (f".{key}", _NON_EMPTY)

        return check_id

    def check(p: dict[str, Any]) -> _Problem:
        v = p.get(key)
        if not (isinstance(v, str) and v):
            return (f".{key}", _NON_EMPTY)
        return rest(p)

    return check


def _text_delta(key: str, explain: _Check) -> _Check:
    """The check of a delta payload: a string delta is accepted in one step (one call instead of
    three per streamed delta); anything else is left to ``explain``, the full check."""

    def check(p: dict[str, Any]) -> _Problem:
        v = p.get(key)
        if type(v) is str and v and type(p.get("delta")) is str:
            return None
        return explain(p)

    return check


def _message_started(p: dict[str, Any]) -> _Problem:
    return _first(_req_str(p, "role"), _opt_content(p, "content"))


def _message_delta(p: dict[str, Any]) -> _Problem:
    if "delta" not in p:
        return (".delta", "is required")
    delta = p["delta"]
    if isinstance(delta, str):
        return None
    return _content_problem(delta, ".delta")


def _message_completed(p: dict[str, Any]) -> _Problem:
    return _opt_content(p, "content")


def _reasoning_started(p: dict[str, Any]) -> _Problem:
    return _opt_bool(p, "redacted")


def _string_delta(p: dict[str, Any]) -> _Problem:
    if isinstance(p.get("delta"), str):
        return None
    return (".delta", "must be a string")


def _reasoning_completed(p: dict[str, Any]) -> _Problem:
    return _first(_opt_str(p, "content"), _opt_str(p, "summary"))


def _tool_requested(p: dict[str, Any]) -> _Problem:
    problem = _first(_req_str(p, "name"), _opt_str(p, "arguments"))
    if problem is not None:
        return problem
    if "index" in p and not is_js_integer(p["index"]):
        return (".index", "must be an integer when present")
    if "attempt" in p:
        attempt = p["attempt"]
        if not (is_js_integer(attempt) and attempt >= 1):
            return (".attempt", "must be an integer >= 1 when present")
    return _opt_str(p, "retryOf")


def _approval_requested(p: dict[str, Any]) -> _Problem:
    problem = _first(
        _opt_str(p, "toolCallId"),
        _opt_str(p, "description"),
        _opt_str(p, "risk"),
        _opt_bool(p, "editable"),
        _opt_finite(p, "expiresAt"),
    )
    if problem is not None:
        return problem
    if "version" in p:
        version = p["version"]
        if not (isinstance(version, str) or is_js_finite(version)):
            return (".version", "must be a string or a finite number when present")
    return None


def _approval_resolved(p: dict[str, Any]) -> _Problem:
    decision = p.get("decision")
    if isinstance(decision, str) and decision in APPROVAL_DECISIONS:
        return None
    return (".decision", "must be one of approved, rejected, modified, expired")


def _task_created(p: dict[str, Any]) -> _Problem:
    return _first(_req_str(p, "title"), _opt_str(p, "description"))


def _task_updated(p: dict[str, Any]) -> _Problem:
    return _first(_opt_str(p, "title"), _opt_str(p, "description"), _opt_finite(p, "progress"))


def _artifact_created(p: dict[str, Any]) -> _Problem:
    return _first(_req_str(p, "name"), _opt_str(p, "mediaType"))


def _artifact_updated(p: dict[str, Any]) -> _Problem:
    if "content" in p:
        return None
    return (".content", "is required")


_PAYLOAD_CHECKS: Final[dict[str, _Check]] = {
    "session.started": _session_started,
    "run.started": _run_started,
    "run.completed": _run_completed,
    "run.failed": _with_error,
    "run.cancelled": _with_reason,
    "message.started": _id_then("messageId", _message_started),
    "message.delta": _id_then("messageId", _message_delta),
    "message.completed": _id_then("messageId", _message_completed),
    "message.failed": _id_then("messageId", _with_error),
    "message.cancelled": _id_then("messageId", _with_reason),
    "reasoning.started": _id_then("reasoningId", _reasoning_started),
    "reasoning.delta": _id_then("reasoningId", _string_delta),
    "reasoning.completed": _id_then("reasoningId", _reasoning_completed),
    "reasoning.failed": _id_then("reasoningId", _with_error),
    "reasoning.cancelled": _id_then("reasoningId", _with_reason),
    "tool.requested": _id_then("toolCallId", _tool_requested),
    "tool.arguments_delta": _id_then("toolCallId", _string_delta),
    "tool.running": _id_then("toolCallId", None),
    "tool.completed": _id_then("toolCallId", None),
    "tool.failed": _id_then("toolCallId", _with_error),
    "tool.cancelled": _id_then("toolCallId", _with_reason),
    "approval.requested": _id_then("approvalId", _approval_requested),
    "approval.resolved": _id_then("approvalId", _approval_resolved),
    "task.created": _id_then("taskId", _task_created),
    "task.updated": _id_then("taskId", _task_updated),
    "task.completed": _id_then("taskId", None),
    "task.failed": _id_then("taskId", _with_error),
    "task.cancelled": _id_then("taskId", _with_reason),
    "artifact.created": _id_then("artifactId", _artifact_created),
    "artifact.updated": _id_then("artifactId", _artifact_updated),
    "artifact.completed": _id_then("artifactId", None),
    "artifact.failed": _id_then("artifactId", _with_error),
}
#: The checks the fast acceptance uses: the same, with text deltas accepted in one call.
_FAST_CHECKS: Final[dict[str, _Check]] = {
    **_PAYLOAD_CHECKS,
    "message.delta": _text_delta("messageId", _PAYLOAD_CHECKS["message.delta"]),
    "reasoning.delta": _text_delta("reasoningId", _PAYLOAD_CHECKS["reasoning.delta"]),
    "tool.arguments_delta": _text_delta("toolCallId", _PAYLOAD_CHECKS["tool.arguments_delta"]),
}

_isfinite = math.isfinite


def validate_event(data: object) -> EventValidationError | None:
    """Return why ``data`` is not a valid AgentEvent, or None when it is. Never raises."""
    try:
        return _validate(data)
    except Exception as exc:  # pragma: no cover - defensive: odd mappings/objects
        return EventValidationError("$", f"could not be checked ({type(exc).__name__})")


#: Beyond this magnitude an integer is Infinity in JavaScript (``core.jsnum``).
_INT_LIMIT: Final = 2**1024 - 2**970


def _validate(data: object) -> EventValidationError | None:
    """``validate_event`` without its guard: may raise on odd mappings."""
    if type(data) is dict:
        # Fast acceptance of the common shape (exact types, int sequence, int or float
        # timestamp), one expression (see BENCHMARKS.md, "Costs behind the code's shortcuts").
        # Anything it does not accept, valid or not, takes the general check below, which
        # names the first problem.
        etype = data.get("type")
        check = _FAST_CHECKS.get(etype) if type(etype) is str else None
        sequence = data.get("sequence")
        timestamp = data.get("timestamp")
        payload = data.get("payload")
        v = data.get("eventId")
        w = data.get("sessionId")
        r = data.get("runId")
        if (
            check is not None
            and data.get("protocolVersion") == PROTOCOL_VERSION
            and type(v) is str
            and v
            and type(w) is str
            and w
            and type(r) is str
            and r
            and type(sequence) is int
            and 0 <= sequence < _INT_LIMIT
            and (
                _isfinite(timestamp)
                if type(timestamp) is float
                else type(timestamp) is int and -_INT_LIMIT < timestamp < _INT_LIMIT
            )
            and type(payload) is dict
            and ("parentId" not in data or type(data["parentId"]) is str)
            and ("meta" not in data or type(data["meta"]) is dict)
            and check(payload) is None
        ):
            return None
    return _validate_general(data)


def _validate_general(data: object) -> EventValidationError | None:
    """Every rule, in the reference's order: the first problem found is the one reported."""
    if type(data) is not dict:
        if not isinstance(data, dict):
            return EventValidationError("$", "must be an object")
    if data.get("protocolVersion") != PROTOCOL_VERSION:
        return EventValidationError("$.protocolVersion", 'must be "0.1"')
    etype = data.get("type")
    check = _PAYLOAD_CHECKS.get(etype) if isinstance(etype, str) else None
    if check is None:
        return EventValidationError("$.type", "must be one of the 32 AgentEvent types")
    v = data.get("eventId")
    if not (isinstance(v, str) and v):
        return EventValidationError("$.eventId", _NON_EMPTY)
    v = data.get("sessionId")
    if not (isinstance(v, str) and v):
        return EventValidationError("$.sessionId", _NON_EMPTY)
    v = data.get("runId")
    if not (isinstance(v, str) and v):
        return EventValidationError("$.runId", _NON_EMPTY)
    v = data.get("sequence")
    if type(v) is int:
        if v < 0 or not is_js_finite(v):
            return EventValidationError("$.sequence", "must be an integer >= 0")
    elif not (is_js_integer(v) and v >= 0):  # type: ignore[operator]
        return EventValidationError("$.sequence", "must be an integer >= 0")
    v = data.get("timestamp")
    if type(v) is float:
        if not _isfinite(v):
            return EventValidationError("$.timestamp", "must be a finite number")
    elif not is_js_finite(v):
        return EventValidationError("$.timestamp", "must be a finite number")
    if "parentId" in data and not isinstance(data["parentId"], str):
        return EventValidationError("$.parentId", _OPT_STR)
    payload = data.get("payload")
    if not isinstance(payload, dict):
        return EventValidationError("$.payload", _OBJECT)
    if "meta" in data and not isinstance(data["meta"], dict):
        return EventValidationError("$.meta", "must be an object when present")
    problem = check(payload)
    if problem is None:
        return None
    return EventValidationError(f"$.payload{problem[0]}", problem[1])


def is_agent_event(data: object) -> bool:
    """``isAgentEvent`` of the reference: a valid envelope whose payload passes its checks."""
    return validate_event(data) is None


def parse_event(data: object) -> AgentEvent:
    """Validate ``data`` and return the typed pydantic model of its event type.

    Raises ``EventValidationError`` (with ``.path`` and ``.reason``) when ``data`` is invalid.
    """
    error = validate_event(data)
    if error is not None:
        raise error
    from core.models import event_adapter

    event: AgentEvent = event_adapter().validate_python(data)
    return event
