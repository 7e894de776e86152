"""Pydantic v2 models of the 32 AgentEvents: a discriminated union on ``type``.

Python attributes are snake_case, the wire (aliases) is camelCase. Used by ``parse_event``, for
typing, and to export the JSON Schema (``core.schema``); events otherwise stay plain dicts.
Extra keys are allowed everywhere (the reference ignores them), so unknown ``meta`` keys and
extra payload keys survive a ``model_dump(by_alias=True, exclude_unset=True)`` round trip.
Validity itself is decided by ``core.events.validate_event`` (JavaScript number rules).
"""

from __future__ import annotations

import operator
from functools import lru_cache, reduce
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema
from pydantic.alias_generators import to_camel

__all__ = [
    "AgentErrorModel",
    "AgentEvent",
    "ApprovalDecision",
    "ContentPart",
    "EventEnvelope",
    "dump_event",
    "event_adapter",
]

NonEmptyStr = Annotated[str, Field(min_length=1)]
#: A JavaScript number (``int`` stays ``int`` so a round trip keeps ``10`` as ``10``).
JsNumber = Annotated[int | float, WithJsonSchema({"type": "number"})]
#: A JavaScript integer (``3.0`` is one).
JsInteger = Annotated[int | float, WithJsonSchema({"type": "integer"})]
Sequence = Annotated[int | float, Field(ge=0), WithJsonSchema({"type": "integer", "minimum": 0})]
Attempt = Annotated[int | float, Field(ge=1), WithJsonSchema({"type": "integer", "minimum": 1})]
ApprovalDecision = Literal["approved", "rejected", "modified", "expired"]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=False
    )


class AgentErrorModel(_Model):
    code: str | None = None
    message: NonEmptyStr
    retryable: bool | None = None
    details: Any = None


class TextPart(_Model):
    type: Literal["text"]
    text: str


class ImagePart(_Model):
    type: Literal["image"]
    url: str | None = None
    data: Any = None
    media_type: str | None = None


class FilePart(_Model):
    type: Literal["file"]
    url: str | None = None
    data: Any = None
    media_type: str | None = None
    name: str | None = None


class NamespacedPart(_Model):
    type: Annotated[str, Field(pattern=r"\.")]
    data: Any


ContentPart = TextPart | ImagePart | FilePart | NamespacedPart
MessageContent = str | list[ContentPart]


# --- payloads -----------------------------------------------------------------------------


class SessionStartedPayload(_Model):
    title: str | None = None


class RunStartedPayload(_Model):
    input: Any = None


class RunCompletedPayload(_Model):
    output: Any = None
    usage: dict[str, JsNumber] | None = None


class ErrorPayload(_Model):
    error: AgentErrorModel


class ReasonPayload(_Model):
    reason: str | None = None


class MessageStartedPayload(_Model):
    message_id: NonEmptyStr
    role: NonEmptyStr
    content: MessageContent | None = None


class MessageDeltaPayload(_Model):
    message_id: NonEmptyStr
    delta: MessageContent


class MessageCompletedPayload(_Model):
    message_id: NonEmptyStr
    content: MessageContent | None = None


class MessageFailedPayload(ErrorPayload):
    message_id: NonEmptyStr


class MessageCancelledPayload(ReasonPayload):
    message_id: NonEmptyStr


class ReasoningStartedPayload(_Model):
    reasoning_id: NonEmptyStr
    redacted: bool | None = None


class ReasoningDeltaPayload(_Model):
    reasoning_id: NonEmptyStr
    delta: str


class ReasoningCompletedPayload(_Model):
    reasoning_id: NonEmptyStr
    content: str | None = None
    summary: str | None = None


class ReasoningFailedPayload(ErrorPayload):
    reasoning_id: NonEmptyStr


class ReasoningCancelledPayload(ReasonPayload):
    reasoning_id: NonEmptyStr


class ToolRequestedPayload(_Model):
    tool_call_id: NonEmptyStr
    name: NonEmptyStr
    arguments: str | None = None
    index: JsInteger | None = None
    attempt: Attempt | None = None
    retry_of: str | None = None


class ToolArgumentsDeltaPayload(_Model):
    tool_call_id: NonEmptyStr
    delta: str


class ToolRunningPayload(_Model):
    tool_call_id: NonEmptyStr


class ToolCompletedPayload(_Model):
    tool_call_id: NonEmptyStr
    result: Any = None


class ToolFailedPayload(ErrorPayload):
    tool_call_id: NonEmptyStr


class ToolCancelledPayload(ReasonPayload):
    tool_call_id: NonEmptyStr


class ApprovalRequestedPayload(_Model):
    approval_id: NonEmptyStr
    tool_call_id: str | None = None
    description: str | None = None
    risk: str | None = None
    data: Any = None
    editable: bool | None = None
    expires_at: JsNumber | None = None
    version: str | JsNumber | None = None


class ApprovalResolvedPayload(_Model):
    approval_id: NonEmptyStr
    decision: ApprovalDecision
    data: Any = None


class TaskCreatedPayload(_Model):
    task_id: NonEmptyStr
    title: NonEmptyStr
    description: str | None = None


class TaskUpdatedPayload(_Model):
    task_id: NonEmptyStr
    title: str | None = None
    description: str | None = None
    progress: JsNumber | None = None


class TaskCompletedPayload(_Model):
    task_id: NonEmptyStr
    result: Any = None


class TaskFailedPayload(ErrorPayload):
    task_id: NonEmptyStr


class TaskCancelledPayload(ReasonPayload):
    task_id: NonEmptyStr


class ArtifactCreatedPayload(_Model):
    artifact_id: NonEmptyStr
    name: NonEmptyStr
    media_type: str | None = None
    content: Any = None


class ArtifactUpdatedPayload(_Model):
    artifact_id: NonEmptyStr
    content: Any = Field(json_schema_extra={"description": "required key, any value"})
    version: Any = None


class ArtifactCompletedPayload(_Model):
    artifact_id: NonEmptyStr
    content: Any = None
    version: Any = None


class ArtifactFailedPayload(ErrorPayload):
    artifact_id: NonEmptyStr


# --- envelope -----------------------------------------------------------------------------


class EventEnvelope(_Model):
    """Fields shared by every AgentEvent (protocol.md §1)."""

    protocol_version: Literal["0.1"]
    event_id: NonEmptyStr
    session_id: NonEmptyStr
    run_id: NonEmptyStr
    sequence: Sequence
    timestamp: JsNumber
    parent_id: str | None = None
    meta: dict[str, Any] | None = None


def _event(type_name: str, payload: type[_Model], class_name: str) -> type[EventEnvelope]:
    model: type[EventEnvelope] = type(
        class_name,
        (EventEnvelope,),
        {
            "__annotations__": {"type": Literal[type_name], "payload": payload},
            "__module__": __name__,
            "__doc__": f"The ``{type_name}`` AgentEvent.",
        },
    )
    return model


_PAYLOADS: dict[str, type[_Model]] = {
    "session.started": SessionStartedPayload,
    "run.started": RunStartedPayload,
    "run.completed": RunCompletedPayload,
    "run.failed": ErrorPayload,
    "run.cancelled": ReasonPayload,
    "message.started": MessageStartedPayload,
    "message.delta": MessageDeltaPayload,
    "message.completed": MessageCompletedPayload,
    "message.failed": MessageFailedPayload,
    "message.cancelled": MessageCancelledPayload,
    "reasoning.started": ReasoningStartedPayload,
    "reasoning.delta": ReasoningDeltaPayload,
    "reasoning.completed": ReasoningCompletedPayload,
    "reasoning.failed": ReasoningFailedPayload,
    "reasoning.cancelled": ReasoningCancelledPayload,
    "tool.requested": ToolRequestedPayload,
    "tool.arguments_delta": ToolArgumentsDeltaPayload,
    "tool.running": ToolRunningPayload,
    "tool.completed": ToolCompletedPayload,
    "tool.failed": ToolFailedPayload,
    "tool.cancelled": ToolCancelledPayload,
    "approval.requested": ApprovalRequestedPayload,
    "approval.resolved": ApprovalResolvedPayload,
    "task.created": TaskCreatedPayload,
    "task.updated": TaskUpdatedPayload,
    "task.completed": TaskCompletedPayload,
    "task.failed": TaskFailedPayload,
    "task.cancelled": TaskCancelledPayload,
    "artifact.created": ArtifactCreatedPayload,
    "artifact.updated": ArtifactUpdatedPayload,
    "artifact.completed": ArtifactCompletedPayload,
    "artifact.failed": ArtifactFailedPayload,
}


def _class_name(type_name: str) -> str:
    parts = type_name.replace("_", ".").split(".")
    return "".join(part.capitalize() for part in parts) + "Event"


EVENT_MODELS: dict[str, type[EventEnvelope]] = {
    type_name: _event(type_name, payload, _class_name(type_name))
    for type_name, payload in _PAYLOADS.items()
}

if TYPE_CHECKING:
    #: The discriminated union of the 32 event models (statically: any of them).
    AgentEvent: TypeAlias = EventEnvelope
else:
    AgentEvent = Annotated[reduce(operator.or_, EVENT_MODELS.values()), Field(discriminator="type")]


@lru_cache(maxsize=1)
def event_adapter() -> TypeAdapter[Any]:
    """The (cached) TypeAdapter of the AgentEvent union."""
    return TypeAdapter(AgentEvent)


def dump_event(event: BaseModel) -> dict[str, Any]:
    """Wire form (camelCase, only the keys that were given) of a parsed event."""
    return event.model_dump(by_alias=True, exclude_unset=True, mode="python")
