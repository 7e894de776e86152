"""AgentEvents of one gateway run → AG-UI events (``ag-ui-protocol`` models), the reverse of
protocol.md §10.

message.* → TEXT_MESSAGE_*, reasoning.* → REASONING_*, tool.* → TOOL_CALL_*, task.* → STEP_*,
the ``agui.state`` / ``agui.activity`` extensions → STATE_SNAPSHOT / ACTIVITY_SNAPSHOT,
run.completed → RUN_FINISHED, run.failed → RUN_ERROR (its code), run.cancelled → RUN_ERROR
``cancelled``; anything else → CUSTOM named by its type (or extension key). Ids are made
unique within the thread (``app/agui/ids.py``). What the client sent in this request (its user
message, its tool results, its approval decisions) is not echoed back. One encoder serves one
AG-UI request: it knows what that request's stream opened and closes nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from ag_ui.core import (
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from app.agui.ids import agui_id

__all__ = ["AguiEncoder", "WaitingOn"]

_ROLES = frozenset({"developer", "system", "assistant", "user"})
_REASON = "approval"
_ID_FIELDS = frozenset(
    {"messageId", "reasoningId", "toolCallId", "approvalId", "taskId", "artifactId"}
)


def _text(value: Any) -> str:
    """Text of a message delta or content: a string, or the text parts of a part list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            str(part.get("text", ""))
            for part in value
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _non_text_parts(value: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    return [part for part in value if not (isinstance(part, dict) and part.get("type") == "text")]


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return orjson.dumps(result).decode()


def _iso(ms: Any) -> str | None:
    """An approval's ``expiresAt`` (ms since epoch) as the ISO 8601 time AG-UI carries."""
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return None
    try:
        moment = datetime.fromtimestamp(ms / 1000.0, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class WaitingOn:
    """What a run that stays open waits for from the client (the end of this request)."""

    def __init__(self, tools: list[str], approvals: list[dict[str, Any]]) -> None:
        self.tools = tools
        self.approvals = approvals


class AguiEncoder:
    def __init__(
        self,
        thread_id: str,
        client_run_id: str,
        run_id: str,
        *,
        answered: Iterable[str] = (),
    ) -> None:
        self.thread_id = thread_id
        self.client_run_id = client_run_id
        self.run_id = run_id
        #: Tool and approval ids the client answered in this request: not echoed back.
        self._answered = set(answered)
        self._silent_messages: set[str] = set()  # the user's own message
        self._open_text: set[str] = set()
        self._streamed_text: set[str] = set()
        self._open_reasoning: set[str] = set()
        self._open_tools: set[str] = set()
        self._open_steps: set[str] = set()
        self._activity: dict[str, Any] = {}
        self.finished = False

    def id(self, entity_id: str) -> str:
        return agui_id(self.run_id, entity_id)

    # -- lifecycle ------------------------------------------------------------------------------

    def started(self) -> RunStartedEvent:
        return RunStartedEvent(thread_id=self.thread_id, run_id=self.client_run_id)

    def _finished(self, outcome: Any = None, result: Any = None) -> RunFinishedEvent:
        self.finished = True
        return RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.client_run_id, result=result, outcome=outcome
        )

    def _error(self, message: str, code: str | None) -> list[BaseEvent]:
        self.finished = True
        return [*self._close_open(), RunErrorEvent(message=message, code=code)]

    def _close_open(self) -> list[BaseEvent]:
        """End what this stream opened and the run left open (a run ending mid-entity)."""
        out: list[BaseEvent] = []
        for ident in sorted(self._open_text):
            out.append(TextMessageEndEvent(message_id=ident))
        for ident in sorted(self._open_reasoning):
            out += [ReasoningMessageEndEvent(message_id=ident), ReasoningEndEvent(message_id=ident)]
        for ident in sorted(self._open_tools):
            out.append(ToolCallEndEvent(tool_call_id=ident))
        for ident in sorted(self._open_steps):
            out.append(StepFinishedEvent(step_name=ident))
        self._open_text.clear()
        self._open_reasoning.clear()
        self._open_tools.clear()
        self._open_steps.clear()
        return out

    def waiting(self, on: WaitingOn) -> list[BaseEvent]:
        """The end of this request's stream while the run waits on the client."""
        out = self._close_open()
        if on.approvals:
            interrupts = [self._interrupt(approval) for approval in on.approvals]
            out.append(self._finished(RunFinishedInterruptOutcome(interrupts=interrupts)))
        else:
            pending = [self.id(tool) for tool in on.tools]
            out.append(self._finished(RunFinishedSuccessOutcome(pending_tool_call_ids=pending)))
        return out

    def lost(self, message: str, code: str) -> list[BaseEvent]:
        """The end of a stream that cannot follow the run any more."""
        return self._error(message, code)

    def _interrupt(self, approval: dict[str, Any]) -> Interrupt:
        data = approval.get("data") if isinstance(approval.get("data"), dict) else {}
        metadata: dict[str, Any] = {"approvalId": approval["id"]}
        for key in ("risk", "editable", "version", "data"):
            if approval.get(key) is not None:
                metadata[key] = approval[key]
        tool_call = approval.get("toolCallId")
        schema = data.get("responseSchema") if isinstance(data, dict) else None
        return Interrupt(
            id=self.id(str(approval["id"])),
            reason=str(data.get("reason") or _REASON) if isinstance(data, dict) else _REASON,
            message=approval.get("description"),
            tool_call_id=self.id(str(tool_call)) if tool_call else None,
            response_schema=schema if isinstance(schema, dict) else None,
            expires_at=_iso(approval.get("expiresAt")),
            metadata=metadata,
        )

    # -- events ---------------------------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> list[BaseEvent]:
        """The AG-UI events of one AgentEvent of this run."""
        kind = str(event.get("type"))
        payload: dict[str, Any] = event.get("payload") or {}
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return handler(self, payload, event)
        return [self._custom(kind, payload)]

    def extension(self, key: str, value: Any) -> list[BaseEvent]:
        if key == "agui.state":
            return [StateSnapshotEvent(snapshot=value)]
        if key == "agui.activity" and isinstance(value, dict):
            out: list[BaseEvent] = []
            for message_id, activity in value.items():
                if self._activity.get(message_id) == activity or not isinstance(activity, dict):
                    continue
                self._activity[message_id] = activity
                content = activity.get("content")
                out.append(
                    ActivitySnapshotEvent(
                        message_id=self.id(f"activity:{message_id}"),
                        activity_type=str(activity.get("activityType") or "activity"),
                        content=content if isinstance(content, dict) else {"value": content},
                    )
                )
            return out
        if key == "agui.custom" and isinstance(value, dict) and value.get("type") == "CUSTOM":
            return [CustomEvent(name=str(value.get("name")), value=value.get("value"))]
        return [CustomEvent(name=key, value=value)]

    def _custom(self, kind: str, payload: dict[str, Any]) -> CustomEvent:
        """An AgentEvent with no AG-UI counterpart, its entity ids as AG-UI ids."""
        value = {
            key: self.id(str(item)) if key in _ID_FIELDS and isinstance(item, str) else item
            for key, item in payload.items()
        }
        return CustomEvent(name=kind, value=value)

    # run

    def _run_started(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        return []  # RUN_STARTED opens every request's stream (``started``)

    def _run_completed(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        return [*self._close_open(), self._finished(result=payload.get("output"))]

    def _run_failed(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        error = payload.get("error") or {}
        message = str(error.get("message") or "The run failed.")
        return self._error(message, str(error.get("code") or "run_failed"))

    def _run_cancelled(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        reason = payload.get("reason")
        return self._error(f"The run was cancelled ({reason or 'aborted'}).", "cancelled")

    # messages

    def _message_started(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["messageId"])
        role = str(payload.get("role"))
        if role == "user":  # the client's own message: not echoed
            self._silent_messages.add(ident)
            return []
        agui = self.id(ident)
        self._open_text.add(agui)
        start = TextMessageStartEvent(message_id=agui, role=role if role in _ROLES else "assistant")
        return [start, *self._content(ident, payload.get("content"))]

    def _content(self, ident: str, content: Any) -> list[BaseEvent]:
        agui = self.id(ident)
        out: list[BaseEvent] = []
        text = _text(content)
        if text:
            self._streamed_text.add(agui)
            out.append(TextMessageContentEvent(message_id=agui, delta=text))
        parts = _non_text_parts(content)
        if parts:
            out.append(
                CustomEvent(name="message.content", value={"messageId": agui, "parts": parts})
            )
        return out

    def _message_delta(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["messageId"])
        if ident in self._silent_messages or self.id(ident) not in self._open_text:
            return []
        return self._content(ident, payload.get("delta"))

    def _message_end(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["messageId"])
        agui = self.id(ident)
        if ident in self._silent_messages or agui not in self._open_text:
            return []
        out: list[BaseEvent] = []
        if event["type"] == "message.completed" and agui not in self._streamed_text:
            out += self._content(ident, payload.get("content"))
        self._open_text.discard(agui)
        out.append(TextMessageEndEvent(message_id=agui))
        if event["type"] != "message.completed":
            out.append(self._custom(str(event["type"]), payload))
        return out

    # reasoning

    def _reasoning_started(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["reasoningId"]))
        self._open_reasoning.add(agui)
        return [
            ReasoningStartEvent(message_id=agui),
            ReasoningMessageStartEvent(message_id=agui, role="reasoning"),
        ]

    def _reasoning_delta(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["reasoningId"]))
        delta = payload.get("delta")
        if agui not in self._open_reasoning or not isinstance(delta, str) or not delta:
            return []
        return [ReasoningMessageContentEvent(message_id=agui, delta=delta)]

    def _reasoning_end(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["reasoningId"]))
        if agui not in self._open_reasoning:
            return []
        self._open_reasoning.discard(agui)
        out: list[BaseEvent] = [
            ReasoningMessageEndEvent(message_id=agui),
            ReasoningEndEvent(message_id=agui),
        ]
        if event["type"] != "reasoning.completed":
            out.append(self._custom(str(event["type"]), payload))
        return out

    # tools

    def _tool_requested(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["toolCallId"]))
        self._open_tools.add(agui)
        parent = event.get("parentId")
        out: list[BaseEvent] = [
            ToolCallStartEvent(
                tool_call_id=agui,
                tool_call_name=str(payload["name"]),
                parent_message_id=self.id(str(parent)) if parent else None,
            )
        ]
        arguments = payload.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(ToolCallArgsEvent(tool_call_id=agui, delta=arguments))
        return out

    def _tool_arguments(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["toolCallId"]))
        delta = payload.get("delta")
        if agui not in self._open_tools or not isinstance(delta, str) or not delta:
            return []
        return [ToolCallArgsEvent(tool_call_id=agui, delta=delta)]

    def _end_tool(self, agui: str) -> list[BaseEvent]:
        if agui not in self._open_tools:
            return []
        self._open_tools.discard(agui)
        return [ToolCallEndEvent(tool_call_id=agui)]

    def _tool_running(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        return self._end_tool(self.id(str(payload["toolCallId"])))

    def _tool_completed(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["toolCallId"])
        agui = self.id(ident)
        out = self._end_tool(agui)
        if ident in self._answered:  # the client's own result: not echoed
            return out
        out.append(
            ToolCallResultEvent(
                message_id=self.id(f"result:{ident}"),
                tool_call_id=agui,
                content=_result_text(payload.get("result")),
                role="tool",
            )
        )
        return out

    def _tool_closed(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["toolCallId"])
        agui = self.id(ident)
        out = self._end_tool(agui)
        if ident not in self._answered:
            out.append(self._custom(str(event["type"]), payload))
        return out

    # approvals (sent as interrupts when the run waits; see ``waiting``)

    def _approval_requested(
        self, payload: dict[str, Any], event: dict[str, Any]
    ) -> list[BaseEvent]:
        return []

    def _approval_resolved(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        ident = str(payload["approvalId"])
        if ident in self._answered:  # the client's own decision: not echoed
            return []
        return [self._custom("approval.resolved", payload)]

    # tasks

    def _task_created(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["taskId"]))
        self._open_steps.add(agui)
        return [StepStartedEvent(step_name=agui)]

    def _task_end(self, payload: dict[str, Any], event: dict[str, Any]) -> list[BaseEvent]:
        agui = self.id(str(payload["taskId"]))
        if agui not in self._open_steps:
            return []
        self._open_steps.discard(agui)
        out: list[BaseEvent] = [StepFinishedEvent(step_name=agui)]
        if event["type"] != "task.completed" or payload.get("result") is not None:
            out.append(self._custom(str(event["type"]), payload))
        return out


_HANDLERS = {
    "run.started": AguiEncoder._run_started,
    "run.completed": AguiEncoder._run_completed,
    "run.failed": AguiEncoder._run_failed,
    "run.cancelled": AguiEncoder._run_cancelled,
    "message.started": AguiEncoder._message_started,
    "message.delta": AguiEncoder._message_delta,
    "message.completed": AguiEncoder._message_end,
    "message.failed": AguiEncoder._message_end,
    "message.cancelled": AguiEncoder._message_end,
    "reasoning.started": AguiEncoder._reasoning_started,
    "reasoning.delta": AguiEncoder._reasoning_delta,
    "reasoning.completed": AguiEncoder._reasoning_end,
    "reasoning.failed": AguiEncoder._reasoning_end,
    "reasoning.cancelled": AguiEncoder._reasoning_end,
    "tool.requested": AguiEncoder._tool_requested,
    "tool.arguments_delta": AguiEncoder._tool_arguments,
    "tool.running": AguiEncoder._tool_running,
    "tool.completed": AguiEncoder._tool_completed,
    "tool.failed": AguiEncoder._tool_closed,
    "tool.cancelled": AguiEncoder._tool_closed,
    "approval.requested": AguiEncoder._approval_requested,
    "approval.resolved": AguiEncoder._approval_resolved,
    "task.created": AguiEncoder._task_created,
    "task.completed": AguiEncoder._task_end,
    "task.failed": AguiEncoder._task_end,
    "task.cancelled": AguiEncoder._task_end,
}
