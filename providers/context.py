"""The per-run context of :class:`providers.base.ProviderBase`: the helper API of providers.

A provider maps upstream chunks to calls on its ``ctx`` (a :class:`RunContext`); each call
creates the event with the run's single :class:`core.factory.EventFactory`, tracks which
entities are open, and queues the event; the base class hands the queue to the runner.

Helper API (ids are the provider's; every helper takes keyword-only ``meta`` and returns the
event):

- messages: ``open_message(id, role="assistant", content=None)``, ``message_delta(id, delta)``,
  ``complete_message(id, content=None)``
- reasoning: ``open_reasoning(id, redacted=None)``, ``reasoning_delta(id, delta)``,
  ``complete_reasoning(id, content=None, summary=None)``
- tools: ``request_tool(id, name, arguments=None, index=None, executor="runtime"|"app",
  attempt=None, retry_of=None)``, ``tool_arguments(id, delta)``, ``tool_running(id)``,
  ``complete_tool(id, result)``, ``fail_tool(id, error)``
- approvals: ``request_approval(id, tool_call_id=, description=, risk=, data=, editable=,
  expires_at=, version=)``, ``resolve_approval(id, decision, data=None)``
- tasks: ``create_task(id, title, description=None)``, ``update_task(id, title=,
  description=, progress=)``, ``complete_task(id, result=)``, ``fail_task(id, error)``
- artifacts: ``create_artifact(id, name, media_type=None, content=)``,
  ``update_artifact(id, content, version=None)``, ``complete_artifact(id, content=,
  version=)``, ``fail_artifact(id, error)``
- anything else: ``emit(type, payload, parent_id=None, meta=None)`` (also tracked);
  ``fail_entity(kind, id, error)`` / ``cancel_entity(kind, id, reason)``
- extensions (not AgentEvents): ``extension("agui.state", value)``
- run end: ``finish(output=None, usage=None)`` (closure table "flush"; returns False while
  something waits on the app), ``fail(error)``, ``cancel(reason)``, ``time_out(error)``; or set
  ``ctx.output`` / ``ctx.usage`` and let the base's ``flush`` finish the run.
- queries: ``is_open(kind, id)``, ``entity(kind, id)``, ``open_entities()``, ``is_waiting()``,
  ``tool(id)`` (every tool of the run, open or not), ``ended``, ``terminal``,
  ``history`` (§11: the conversation before this run plus this run so far), ``transcript``
  (this provider's per-conversation dict, mutate in place), ``scratch`` (provider-private).

Tool hand-off (§9): ``request_tool(..., executor="app")`` marks ``meta.executor = "app"``; when
the arguments are complete call ``tool_running(id)`` (the base's flush does it too) and the run
waits for ``tool.submit_result``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.factory import EventFactory
from core.kinds import ID_FIELDS, START_STATUSES, START_TYPES
from core.runs import RUN_TERMINAL_TYPES, TITLE_MAX_CHARS
from providers.closure import Cause, OpenEntity, close_entity, is_waiting
from providers.contract import AgentEvent, RunOptions
from providers.errors import ProviderError, to_agent_error
from providers.run_events import RunEventLog

__all__ = ["MISSING", "RunContext", "ToolRecord", "input_text"]

#: Text deltas change nothing :meth:`RunContext._track` follows (tool argument deltas do).
_UNTRACKED = frozenset({"message.delta", "reasoning.delta"})


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: Marks "no value" where ``None`` is a legitimate value (a tool result, artifact content).
MISSING: Any = _Missing()

USER_MESSAGE_ID = "user"


@dataclass(slots=True)
class ToolRecord:
    id: str
    name: str
    executor: str
    arguments: str = ""
    attempt: int = 1
    index: int | None = None
    status: str = "pending"
    error: dict[str, Any] | None = None


def input_text(input: Mapping[str, Any]) -> str:
    """The text of a run input: ``prompt``, or the text parts of ``content``."""
    prompt = input.get("prompt")
    if isinstance(prompt, str):
        return prompt
    content = input.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def _put(payload: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value is not MISSING:
        payload[key] = value


class RunContext:
    """Everything one run of one provider needs; see the module docstring for the API."""

    def __init__(self, options: RunOptions, provider_id: str = "provider") -> None:
        self.options = options
        self.provider_id = provider_id
        self.factory = EventFactory(options.session_id, options.run_id, options.now)
        self.input: Mapping[str, Any] = {}
        self.output: Any = None
        self.usage: dict[str, Any] | None = None
        self.terminal: str | None = None
        #: This run's events, text deltas merged (for ``history``; see providers.run_events).
        self.events = RunEventLog()
        self.scratch: dict[str, Any] = {}
        #: Commands accepted since the last upstream request (native continuation, §10).
        self.commands_since_request: list[dict[str, Any]] = []
        self._outbox: list[AgentEvent] = []
        self._extensions: list[tuple[str, Any]] = []
        self._open: dict[tuple[str, str], OpenEntity] = {}
        self._tools: dict[str, ToolRecord] = {}

    # -- basics -------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.options.session_id

    @property
    def run_id(self) -> str:
        return self.options.run_id

    @property
    def signal(self) -> Any:
        return self.options.signal

    @property
    def transcript(self) -> dict[str, Any]:
        return self.options.transcript

    @property
    def ended(self) -> bool:
        return self.terminal is not None

    def emit(
        self,
        type: str,
        payload: Mapping[str, Any],
        *,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        """Create, track and queue one event of this run."""
        if self.terminal is not None:
            raise ProviderError(
                f'Provider "{self.provider_id}" emitted "{type}" after the run ended.'
            )
        event = self.factory.create(type, payload, parent_id=parent_id, meta=meta)
        if type not in _UNTRACKED:
            self._track(type, event["payload"], meta)
        self._outbox.append(event)
        self.events.append(event)
        return event

    def _emit_text(
        self, type: str, payload: dict[str, Any], meta: Mapping[str, Any] | None
    ) -> AgentEvent:
        """``emit`` of a text delta (no parent, nothing to track): one call per streamed delta."""
        if self.terminal is not None:
            raise ProviderError(
                f'Provider "{self.provider_id}" emitted "{type}" after the run ended.'
            )
        if meta is None:
            event = self.factory.next_event(type, payload)
        else:
            event = self.factory.create(type, payload, meta=meta)
        self._outbox.append(event)
        self.events.append(event)
        return event

    def take(self) -> list[AgentEvent]:
        """The queued events, emptying the queue (the base class calls this)."""
        out, self._outbox = self._outbox, []
        return out

    def extension(self, key: str, value: Any) -> None:
        """Queue a namespaced extension value (``"agui.state"`` ...): never an AgentEvent."""
        self._extensions.append((key, value))

    def take_extensions(self) -> list[tuple[str, Any]]:
        out, self._extensions = self._extensions, []
        return out

    # -- tracking -----------------------------------------------------------------------------

    def _track(self, type: str, payload: Mapping[str, Any], meta: Mapping[str, Any] | None) -> None:
        if type in _UNTRACKED:
            return
        kind = START_TYPES.get(type)
        if kind is not None:
            status = START_STATUSES[kind]
            ident = payload[ID_FIELDS[kind]]
            executor = meta.get("executor") if meta is not None else None
            if executor not in ("app", "gateway"):
                executor = "runtime"
            self._open[(kind, ident)] = OpenEntity(kind, ident, status, executor)
            if kind == "tool":
                self._tools[ident] = ToolRecord(
                    ident,
                    payload["name"],
                    executor,
                    payload.get("arguments") or "",
                    payload.get("attempt") or 1,
                    payload.get("index"),
                )
            return
        if type in RUN_TERMINAL_TYPES:
            self.terminal = type
            return
        kind, _, action = type.partition(".")
        field_name = ID_FIELDS.get(kind)
        if field_name is None:
            return
        ident = payload.get(field_name)
        entity = self._open.get((kind, ident)) if isinstance(ident, str) else None
        record = self._tools.get(ident) if kind == "tool" and isinstance(ident, str) else None
        if action in ("completed", "failed", "cancelled", "resolved"):
            self._open.pop((kind, ident), None)  # type: ignore[arg-type]
            if record is not None:
                record.status = action
                record.error = payload.get("error")
        elif action == "running" or (kind == "task" and action == "updated"):
            if entity is not None:
                entity.status = "running"
            if record is not None:
                record.status = "running"
        elif action == "arguments_delta" and record is not None:
            record.arguments += payload.get("delta", "")

    def is_open(self, kind: str, ident: str) -> bool:
        return (kind, ident) in self._open

    def entity(self, kind: str, ident: str) -> OpenEntity | None:
        return self._open.get((kind, ident))

    def open_entities(self) -> list[OpenEntity]:
        """Open entities in opening order."""
        return list(self._open.values())

    def is_waiting(self) -> bool:
        """True while something waits on the app (an approval, a tool handed to the app)."""
        return any(is_waiting(entity) for entity in self._open.values())

    def tool(self, ident: str) -> ToolRecord | None:
        return self._tools.get(ident)

    @property
    def history(self) -> list[dict[str, Any]]:
        """The conversation for the next upstream call (§11): ``input.messages`` or the derived
        history of earlier runs, then this run's own messages and tool results so far."""
        from providers.history import derive_run_history

        messages = self.input.get("messages")
        base = list(messages) if isinstance(messages, list) else list(self.options.history)
        return base + derive_run_history(self.events)

    # -- run lifecycle ------------------------------------------------------------------------

    def begin(self, input: Mapping[str, Any]) -> None:
        """``session.started`` (first run), ``run.started``, then the user message (§11)."""
        self.input = input
        text = input_text(input)
        if self.options.start_session:
            title = self.options.session_title or text[:TITLE_MAX_CHARS]
            self.emit("session.started", {"title": title} if title else {})
        self.emit("run.started", {"input": dict(input)})
        if not self.options.emit_user_message:
            return
        content = input.get("content")
        if not isinstance(content, str | list):
            content = input.get("prompt")
        if isinstance(content, str | list) and content:
            self.open_message(USER_MESSAGE_ID, "user", content)
            self.complete_message(USER_MESSAGE_ID)

    def close_open(
        self, cause: Cause, error: dict[str, Any] | None = None, reason: str = ""
    ) -> None:
        """Close every open entity by the closure table, in reverse order of opening."""
        run_error = error or {"message": "The run failed."}
        for entity in reversed(list(self._open.values())):
            steps = close_entity(entity, cause, run_error, reason or "aborted")
            for type, payload in steps or ():
                self.emit(type, payload)

    def finish(self, output: Any = None, usage: Mapping[str, Any] | None = None) -> bool:
        """The upstream ended normally: close by the "flush" column; then ``run.completed``
        unless something waits on the app (returns False: the run stays open)."""
        if self.ended:
            return True
        self.close_open("flush")
        if self.is_waiting():
            return False
        payload: dict[str, Any] = {}
        _put(payload, "output", output if output is not None else self.output)
        _put(payload, "usage", dict(usage) if usage is not None else self.usage)
        self.emit("run.completed", payload)
        return True

    def fail(self, error: BaseException | Mapping[str, Any]) -> None:
        """Close every open entity with the run's error, then ``run.failed``."""
        if self.ended:
            return
        agent_error = dict(error) if isinstance(error, Mapping) else to_agent_error(error)
        self.close_open("error", agent_error)
        self.emit("run.failed", {"error": agent_error})

    def cancel(self, reason: str = "aborted") -> None:
        if self.ended:
            return
        self.close_open("abort", reason=reason)
        self.emit("run.cancelled", {"reason": reason})

    def time_out(self, error: BaseException | Mapping[str, Any]) -> None:
        """The run waited on the app too long: closure column "wait timeout", ``run.failed``."""
        if self.ended:
            return
        agent_error = dict(error) if isinstance(error, Mapping) else to_agent_error(error)
        self.close_open("wait_timeout", agent_error)
        self.emit("run.failed", {"error": agent_error})

    # -- entity helpers -----------------------------------------------------------------------

    def open_message(
        self,
        message_id: str,
        role: str = "assistant",
        content: Any = None,
        *,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"messageId": message_id, "role": role}
        _put(payload, "content", content)
        return self.emit("message.started", payload, parent_id=parent_id, meta=meta)

    def message_delta(
        self, message_id: str, delta: Any, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        return self._emit_text("message.delta", {"messageId": message_id, "delta": delta}, meta)

    def complete_message(
        self, message_id: str, content: Any = None, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        payload: dict[str, Any] = {"messageId": message_id}
        _put(payload, "content", content)
        return self.emit("message.completed", payload, meta=meta)

    def open_reasoning(
        self,
        reasoning_id: str,
        *,
        redacted: bool | None = None,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"reasoningId": reasoning_id}
        _put(payload, "redacted", redacted)
        return self.emit("reasoning.started", payload, parent_id=parent_id, meta=meta)

    def reasoning_delta(
        self, reasoning_id: str, delta: str, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        payload = {"reasoningId": reasoning_id, "delta": delta}
        return self._emit_text("reasoning.delta", payload, meta)

    def complete_reasoning(
        self,
        reasoning_id: str,
        content: str | None = None,
        summary: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"reasoningId": reasoning_id}
        _put(payload, "content", content)
        _put(payload, "summary", summary)
        return self.emit("reasoning.completed", payload, meta=meta)

    def request_tool(
        self,
        tool_call_id: str,
        name: str,
        arguments: str | None = None,
        *,
        index: int | None = None,
        executor: str = "runtime",
        attempt: int | None = None,
        retry_of: str | None = None,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"toolCallId": tool_call_id, "name": name}
        _put(payload, "arguments", arguments)
        _put(payload, "index", index)
        _put(payload, "attempt", attempt)
        _put(payload, "retryOf", retry_of)
        merged = dict(meta or {})
        if executor == "app":
            merged["executor"] = "app"
        return self.emit("tool.requested", payload, parent_id=parent_id, meta=merged or None)

    def tool_arguments(
        self, tool_call_id: str, delta: str, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        payload = {"toolCallId": tool_call_id, "delta": delta}
        return self.emit("tool.arguments_delta", payload, meta=meta)

    def tool_running(
        self, tool_call_id: str, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        return self.emit("tool.running", {"toolCallId": tool_call_id}, meta=meta)

    def complete_tool(
        self, tool_call_id: str, result: Any = MISSING, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        payload: dict[str, Any] = {"toolCallId": tool_call_id}
        if result is not MISSING:
            payload["result"] = result
        return self.emit("tool.completed", payload, meta=meta)

    def fail_tool(
        self,
        tool_call_id: str,
        error: Mapping[str, Any] | BaseException,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        return self.fail_entity("tool", tool_call_id, error, meta=meta)

    def request_approval(
        self,
        approval_id: str,
        *,
        tool_call_id: str | None = None,
        description: str | None = None,
        risk: str | None = None,
        data: Any = MISSING,
        editable: bool | None = None,
        expires_at: float | None = None,
        version: str | float | None = None,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"approvalId": approval_id}
        _put(payload, "toolCallId", tool_call_id)
        _put(payload, "description", description)
        _put(payload, "risk", risk)
        if data is not MISSING:
            payload["data"] = data
        _put(payload, "editable", editable)
        _put(payload, "expiresAt", expires_at)
        _put(payload, "version", version)
        return self.emit("approval.requested", payload, parent_id=parent_id, meta=meta)

    def resolve_approval(
        self,
        approval_id: str,
        decision: str,
        data: Any = MISSING,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"approvalId": approval_id, "decision": decision}
        if data is not MISSING and data is not None:
            payload["data"] = data
        return self.emit("approval.resolved", payload, meta=meta)

    def create_task(
        self,
        task_id: str,
        title: str,
        description: str | None = None,
        *,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"taskId": task_id, "title": title}
        _put(payload, "description", description)
        return self.emit("task.created", payload, parent_id=parent_id, meta=meta)

    def update_task(
        self,
        task_id: str,
        *,
        title: str | None = None,
        description: str | None = None,
        progress: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"taskId": task_id}
        _put(payload, "title", title)
        _put(payload, "description", description)
        _put(payload, "progress", progress)
        return self.emit("task.updated", payload, meta=meta)

    def complete_task(
        self, task_id: str, result: Any = MISSING, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        payload: dict[str, Any] = {"taskId": task_id}
        if result is not MISSING:
            payload["result"] = result
        return self.emit("task.completed", payload, meta=meta)

    def fail_task(
        self,
        task_id: str,
        error: Mapping[str, Any] | BaseException,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        return self.fail_entity("task", task_id, error, meta=meta)

    def create_artifact(
        self,
        artifact_id: str,
        name: str,
        *,
        media_type: str | None = None,
        content: Any = MISSING,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"artifactId": artifact_id, "name": name}
        _put(payload, "mediaType", media_type)
        if content is not MISSING:
            payload["content"] = content
        return self.emit("artifact.created", payload, parent_id=parent_id, meta=meta)

    def update_artifact(
        self,
        artifact_id: str,
        content: Any,
        version: str | float | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"artifactId": artifact_id, "content": content}
        _put(payload, "version", version)
        return self.emit("artifact.updated", payload, meta=meta)

    def complete_artifact(
        self,
        artifact_id: str,
        content: Any = MISSING,
        version: str | float | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {"artifactId": artifact_id}
        if content is not MISSING:
            payload["content"] = content
        _put(payload, "version", version)
        return self.emit("artifact.completed", payload, meta=meta)

    def fail_artifact(
        self,
        artifact_id: str,
        error: Mapping[str, Any] | BaseException,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        return self.fail_entity("artifact", artifact_id, error, meta=meta)

    def fail_entity(
        self,
        kind: str,
        ident: str,
        error: Mapping[str, Any] | BaseException,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        agent_error = dict(error) if isinstance(error, Mapping) else to_agent_error(error)
        payload = {ID_FIELDS[kind]: ident, "error": agent_error}
        return self.emit(f"{kind}.failed", payload, meta=meta)

    def cancel_entity(
        self,
        kind: str,
        ident: str,
        reason: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        payload: dict[str, Any] = {ID_FIELDS[kind]: ident}
        _put(payload, "reason", reason)
        return self.emit(f"{kind}.cancelled", payload, meta=meta)
