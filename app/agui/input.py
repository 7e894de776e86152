"""Reading an AG-UI ``RunAgentInput``: a new turn, or the answers a waiting run needs.

The gateway keeps the conversation's history, so of ``messages`` only the end matters: the
last user message is a new run's input; ``tool`` messages at the end answer the tool calls a
waiting run handed to the client; ``resume`` answers its interrupts (approvals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ag_ui.core import RunAgentInput, ToolMessage, UserMessage

from app.agui.ids import parse_agui_id
from app.errors import InvalidRequest

__all__ = ["ApprovalAnswer", "NewTurn", "ToolAnswer", "TurnRequest", "read_input"]

Multitask = Literal["reject", "interrupt", "enqueue"]
_MULTITASK = ("reject", "interrupt", "enqueue")
#: ``forwardedProps`` keys the gateway reads itself (never handed to the provider).
_GATEWAY_PROPS = ("provider", "multitask")


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A client ``tool`` message: the result of a tool call the run handed to the client."""

    run_id: str
    tool_call_id: str
    result: Any
    is_error: bool


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A ``resume`` entry: the decision on an approval sent as an interrupt."""

    run_id: str
    approval_id: str
    decision: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class NewTurn:
    """A new run's provider-neutral input (http-api.md, ``POST …/runs``)."""

    input: dict[str, Any]
    multitask: Multitask | None


@dataclass(frozen=True, slots=True)
class TurnRequest:
    thread_id: str
    run_id: str
    #: Set for a new run; else the request continues a waiting run with the answers below.
    turn: NewTurn | None
    tools: list[ToolAnswer] = field(default_factory=list)
    approvals: list[ApprovalAnswer] = field(default_factory=list)


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message)


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True)


def _content(content: Any) -> dict[str, Any]:
    """The ``prompt`` (plain text) or ``content`` (parts) of the run's input."""
    if isinstance(content, str):
        return {"prompt": content}
    parts: list[dict[str, Any]] = []
    for part in content:
        dumped = _dump(part)
        if dumped.get("type") == "text":
            parts.append({"type": "text", "text": str(dumped.get("text", ""))})
        else:  # structured content is kept, under a namespaced part type (protocol.md §2)
            parts.append({"type": f"agui.{dumped.get('type', 'part')}", "data": dumped})
    if all(part["type"] == "text" for part in parts):
        return {"prompt": "".join(part["text"] for part in parts)}
    return {"content": parts}


def _tool_answers(body: RunAgentInput) -> list[ToolAnswer]:
    answers: list[ToolAnswer] = []
    for message in reversed(body.messages):
        if not isinstance(message, ToolMessage):
            break
        ids = parse_agui_id(str(message.tool_call_id))
        if ids is None:
            raise _invalid(f"toolCallId {message.tool_call_id!r} is not a call of this gateway.")
        content = message.content if isinstance(message.content, str) else _dump_list(message)
        error = message.error
        answers.append(ToolAnswer(ids[0], ids[1], error or content, is_error=bool(error)))
    answers.reverse()
    return answers


def _dump_list(message: Any) -> list[Any]:
    return [_dump(part) for part in message.content]


def _approval_answers(body: RunAgentInput) -> list[ApprovalAnswer]:
    """``resume`` as our AG-UI provider reads it: payload ``{decision, data?}``, no decision =
    ``approved``, a ``cancelled`` entry = ``rejected``."""
    answers: list[ApprovalAnswer] = []
    for entry in body.resume or ():
        ids = parse_agui_id(entry.interrupt_id)
        if ids is None:
            raise _invalid(f"interruptId {entry.interrupt_id!r} is not an interrupt of this run.")
        if entry.status == "cancelled":
            answers.append(ApprovalAnswer(ids[0], ids[1], "rejected"))
            continue
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        decision = payload.get("decision", "approved")
        if decision not in ("approved", "rejected", "modified"):
            raise _invalid(f"resume decision {decision!r} is not approved, rejected or modified.")
        answers.append(ApprovalAnswer(ids[0], ids[1], decision, payload.get("data")))
    return answers


def _new_turn(body: RunAgentInput) -> NewTurn:
    last = body.messages[-1] if body.messages else None
    if not isinstance(last, UserMessage):
        raise _invalid(
            "messages must end with a new user message, or with tool messages answering the "
            "waiting run's tool calls, or the request must carry resume."
        )
    run_input = _content(last.content)
    if body.tools:
        run_input["tools"] = [_dump(tool) for tool in body.tools]
    if body.context:
        run_input["context"] = [_dump(item) for item in body.context]
    props = body.forwarded_props
    multitask: Multitask | None = None
    if isinstance(props, dict):
        wanted = props.get("multitask")
        if wanted is not None and wanted not in _MULTITASK:
            raise _invalid("forwardedProps.multitask must be reject, interrupt or enqueue.")
        multitask = cast(Multitask | None, wanted)
        rest = {key: value for key, value in props.items() if key not in _GATEWAY_PROPS}
        if rest:
            run_input["forwardedProps"] = rest
    return NewTurn(run_input, multitask)


def read_input(body: RunAgentInput) -> TurnRequest:
    """What the request asks: answers to a waiting run (``resume``, trailing ``tool``
    messages), else a new turn (the last message, a user message)."""
    approvals = _approval_answers(body)
    tools = _tool_answers(body)
    if approvals or tools:
        return TurnRequest(body.thread_id, body.run_id, None, tools, approvals)
    return TurnRequest(body.thread_id, body.run_id, _new_turn(body))
