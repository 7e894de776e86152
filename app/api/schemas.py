"""Request and response bodies of http-api.md (camelCase on the wire)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "AbortAnswer",
    "AbortBody",
    "ApprovalBody",
    "CommandAccepted",
    "ConversationPatch",
    "ErrorBody",
    "ProviderInfo",
    "ProvidersAnswer",
    "ReloadBody",
    "RunAccepted",
    "RunBody",
    "RunRecord",
    "SnapshotBody",
    "ToolResultBody",
]

KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _check_input(value: dict[str, Any]) -> dict[str, Any]:
    expected: dict[str, tuple[type, ...]] = {
        "prompt": (str,),
        "content": (str, list),
        "messages": (list,),
        "tools": (list,),
        "params": (dict,),
    }
    for key, types in expected.items():
        if key in value and not isinstance(value[key], types):
            names = " or ".join("array" if t is list else t.__name__ for t in types)
            raise ValueError(f"input.{key} must be {names.replace('dict', 'object')}")
    return value


class RunBody(_Body):
    input: dict[str, Any]
    provider: str | None = None
    multitask: Literal["reject", "interrupt", "enqueue"] | None = None

    _input = field_validator("input")(_check_input)


class ReloadBody(_Body):
    input: dict[str, Any] | None = None
    provider: str | None = None
    multitask: Literal["reject", "interrupt", "enqueue"] | None = None

    @field_validator("input")
    @classmethod
    def _valid_input(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _check_input(value)


class AbortBody(_Body):
    runId: str | None = Field(default=None, min_length=1)


class ApprovalBody(_Body):
    decision: Literal["approved", "rejected", "modified"]
    data: Any = None
    expectedVersion: str | float | None = None


class ToolResultBody(_Body):
    result: Any
    isError: bool = False


class RunAccepted(BaseModel):
    conversationKey: str
    runId: str
    sessionId: str
    provider: str
    cursor: str
    status: Literal["started", "queued"]


class ConversationPatch(_Body):
    title: str = Field(min_length=1, max_length=200)


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    conversationKey: str
    runId: str
    sessionId: str
    status: Literal["queued", "running", "completed", "failed", "cancelled"]


class AbortAnswer(BaseModel):
    aborted: bool
    runId: str | None = None


class CommandAccepted(BaseModel):
    conversationKey: str
    runId: str
    command: Literal["approval.resolve", "tool.submit_result", "tool.retry"]
    targetId: str


class ProviderInfo(BaseModel):
    name: str
    kind: str
    transport: str
    default: bool
    capabilities: dict[str, Any]


class ProvidersAnswer(BaseModel):
    providers: list[ProviderInfo]


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    conversationKey: str
    cursor: str
    isRequesting: bool
    activeRunId: str | None
    messages: list[dict[str, Any]]
    agentState: dict[str, Any]
    extensions: dict[str, Any] | None = None


class _ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    error: _ErrorDetail
