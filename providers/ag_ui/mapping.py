"""Map AG-UI events (parsed ``ag-ui-protocol`` models) onto the run context (§9, §10).

One handler per event type in ``HANDLERS``. The run's lifecycle events are checked, not mapped:
the gateway run was opened by the base (``run.started``), and one gateway run spans every
upstream request of a tool round trip or an interrupt → resume, so the RUN_STARTED /
RUN_FINISHED of each request are never mapped twice. ``RUN_FINISHED`` with
``outcome: interrupt`` becomes one ``approval.requested`` per interrupt and the run stays open.
Shared state (``STATE_SNAPSHOT`` / ``STATE_DELTA`` with JSON Patch) is the ``agui.state``
extension, ``ACTIVITY_*`` is ``agui.activity``, ``CUSTOM`` / ``RAW`` are ``agui.custom``,
``MESSAGES_SNAPSHOT`` goes to the provider transcript (and ``agui.messages``),
``REASONING_ENCRYPTED_VALUE`` to the transcript.
Violations of the AG-UI event rules (the ``ag-ui-validate`` errors) raise
``UpstreamProtocolError``, which fails the run with ``upstream_protocol_error``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from providers.ag_ui.json_patch import JsonPatchError, apply_patch
from providers.context import RunContext
from providers.errors import UpstreamError, UpstreamProtocolError
from providers.model_calls import parse_arguments

__all__ = ["HANDLERS", "AguiRun", "UpstreamResponse", "handle_event"]

_TRANSCRIPT_LIMIT = 256


def violation(rule: str, message: str) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"AG-UI {rule}: {message}", details={"rule": rule})


@dataclass(slots=True)
class UpstreamResponse:
    """Lifecycle of one upstream request's stream: RUN_STARTED … RUN_FINISHED | RUN_ERROR."""

    started: bool = False
    finished: bool = False
    run_id: str | None = None
    thread_id: str | None = None


@dataclass(slots=True)
class AguiRun:
    """What one gateway run tracks across its upstream requests."""

    frontend_tools: frozenset[str] = frozenset()
    response: UpstreamResponse = field(default_factory=UpstreamResponse)
    upstream_runs: list[str] = field(default_factory=list)
    open_messages: set[str] = field(default_factory=set)
    done_messages: set[str] = field(default_factory=set)
    open_tools: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    tool_results: set[str] = field(default_factory=set)
    open_reasoning: set[str] = field(default_factory=set)
    steps: dict[str, list[str]] = field(default_factory=dict)
    step_count: int = 0
    subagents: set[str] = field(default_factory=set)
    open_subagents: set[str] = field(default_factory=set)
    state: Any = None
    has_state: bool = False
    activity: dict[str, Any] = field(default_factory=dict)
    interrupts: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, float | int] | None = None
    raw_usage: list[Any] = field(default_factory=list)
    result: Any = None
    cancelled: bool = False


Handler = Callable[[AguiRun, RunContext, Any], None]


def _dump(event: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = event.model_dump(mode="json", by_alias=True)
    return dumped


# -- lifecycle ----------------------------------------------------------------------------------


def on_run_started(run: AguiRun, ctx: RunContext, event: Any) -> None:
    response = run.response
    if response.finished:
        raise violation("AGUI004", "RUN_STARTED follows the run's terminal event")
    if response.started:
        raise violation("AGUI002", f"duplicate RUN_STARTED (runId {event.run_id!r})")
    response.started = True
    response.run_id = event.run_id
    response.thread_id = event.thread_id
    run.upstream_runs.append(event.run_id)
    ctx.transcript["threadId"] = event.thread_id


def _check_closed(run: AguiRun) -> None:
    if run.open_messages:
        raise violation("AGUI103", f"message {sorted(run.open_messages)[0]!r} never ended")
    if run.open_tools:
        raise violation("AGUI203", f"tool call {sorted(run.open_tools)[0]!r} never ended")
    open_steps = [name for name, ids in run.steps.items() if ids]
    if open_steps:
        raise violation("AGUI007", f"STEP_STARTED {open_steps[0]!r} never finished")
    if run.open_subagents:
        raise violation("AGUI604", f"subagent {sorted(run.open_subagents)[0]!r} never closed")


def _expires_at(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000.0
    except ValueError:
        return None


def _request_interrupts(run: AguiRun, ctx: RunContext, interrupts: list[Any]) -> None:
    for interrupt in interrupts:
        data: dict[str, Any] = {"reason": interrupt.reason}
        if interrupt.response_schema is not None:
            data["responseSchema"] = interrupt.response_schema
        if interrupt.metadata is not None:
            data["metadata"] = interrupt.metadata
        tool_call_id = interrupt.tool_call_id if interrupt.tool_call_id in run.tools else None
        ctx.request_approval(
            interrupt.id,
            tool_call_id=tool_call_id,
            description=interrupt.message or interrupt.reason,
            data=data,
            expires_at=_expires_at(interrupt.expires_at),
            meta={"interrupt": _dump(interrupt)},
        )
        run.interrupts[interrupt.id] = {"toolCallId": tool_call_id}


def on_run_finished(run: AguiRun, ctx: RunContext, event: Any) -> None:
    response = run.response
    if response.finished:
        raise violation("AGUI004", "RUN_FINISHED follows the run's terminal event")
    _check_closed(run)
    response.finished = True
    for reasoning_id in sorted(run.open_reasoning):  # AGUI402 is a warning: close it
        ctx.complete_reasoning(reasoning_id)
    run.open_reasoning.clear()
    if event.result is not None:
        run.result = event.result
    for usage in event.usage or ():
        raw = _dump(usage)
        run.raw_usage.append(raw)
        total = dict(run.usage or {})
        for key in ("inputTokens", "outputTokens", "totalTokens", "reasoningTokens"):
            if isinstance(raw.get(key), int | float):
                total[key] = total.get(key, 0) + raw[key]
        if isinstance(raw.get("cachedInputTokens"), int | float):
            total["cachedInputTokens"] = (
                total.get("cachedInputTokens", 0) + raw["cachedInputTokens"]
            )
        total.setdefault("inputTokens", 0)
        total.setdefault("outputTokens", 0)
        run.usage = total
    outcome = event.outcome
    if outcome is not None and outcome.type == "interrupt":
        _request_interrupts(run, ctx, list(outcome.interrupts))
    elif outcome is not None and outcome.type == "cancelled":
        run.cancelled = True


def on_run_error(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if run.response.finished:
        raise violation("AGUI005", "RUN_ERROR after the run already terminated")
    run.response.finished = True
    details = {"code": event.code} if event.code else None
    raise UpstreamError(event.message or "The AG-UI run failed.", details=details)


# -- text messages ------------------------------------------------------------------------------


def on_text_start(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.message_id
    if ident in run.open_messages:
        raise violation("AGUI106", f"TEXT_MESSAGE_START for {ident!r}, which is already open")
    if ident in run.done_messages:
        raise violation("AGUI104", f"messageId {ident!r} was already used by a completed message")
    run.open_messages.add(ident)
    meta = {"name": event.name} if getattr(event, "name", None) else None
    ctx.open_message(ident, event.role or "assistant", meta=meta)


def on_text_content(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if event.message_id not in run.open_messages:
        raise violation(
            "AGUI101", f"TEXT_MESSAGE_CONTENT for {event.message_id!r} with no open start"
        )
    if event.delta:  # AGUI105 (empty delta) is a warning: nothing to append
        ctx.message_delta(event.message_id, event.delta)


def on_text_end(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if event.message_id not in run.open_messages:
        raise violation("AGUI102", f"TEXT_MESSAGE_END for {event.message_id!r} with no open start")
    run.open_messages.discard(event.message_id)
    run.done_messages.add(event.message_id)
    ctx.complete_message(event.message_id)


# -- tool calls ---------------------------------------------------------------------------------


def on_tool_start(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.tool_call_id
    if ident in run.tools:
        raise violation("AGUI205", f"toolCallId {ident!r} was already used")
    run.tools.add(ident)
    run.open_tools.add(ident)
    executor = "app" if event.tool_call_name in run.frontend_tools else "runtime"
    ctx.request_tool(
        ident, event.tool_call_name, executor=executor, parent_id=event.parent_message_id
    )


def on_tool_args(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if event.tool_call_id not in run.open_tools:
        raise violation("AGUI201", f"TOOL_CALL_ARGS for {event.tool_call_id!r} with no open start")
    if event.delta:
        ctx.tool_arguments(event.tool_call_id, event.delta)


def on_tool_end(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.tool_call_id
    if ident not in run.open_tools:
        if ident in run.tool_results:
            return  # AGUI206: the result came before the end (a warning); already completed
        raise violation("AGUI202", f"TOOL_CALL_END for {ident!r} with no open start")
    run.open_tools.discard(ident)
    record = ctx.tool(ident)
    arguments = record.arguments if record is not None else ""
    ok, _ = parse_arguments(arguments)
    if not ok:
        raise violation("AGUI204", f"arguments of tool call {ident!r} do not parse as JSON")
    if not arguments.strip():
        ctx.tool_arguments(ident, "{}")
    if ctx.is_open("tool", ident):
        ctx.tool_running(ident)


def on_tool_result(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.tool_call_id
    if ident not in run.tools:
        raise violation("AGUI207", f"TOOL_CALL_RESULT references unknown toolCallId {ident!r}")
    run.tool_results.add(ident)
    run.open_tools.discard(ident)  # AGUI206 (result before end) is a warning
    if ctx.is_open("tool", ident):
        content = event.content if isinstance(event.content, str) else _dump_list(event.content)
        ctx.complete_tool(ident, content, meta={"messageId": event.message_id})


def _dump_list(items: list[Any]) -> list[Any]:
    return [_dump(item) for item in items]


# -- reasoning ----------------------------------------------------------------------------------


def on_reasoning_span(run: AguiRun, ctx: RunContext, event: Any) -> None:
    return None  # REASONING_START / END only frame the reasoning messages


def on_reasoning_start(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.message_id
    if ident in run.open_reasoning:
        raise violation("AGUI401", f"REASONING_MESSAGE_START for {ident!r}, which is already open")
    run.open_reasoning.add(ident)
    ctx.open_reasoning(ident)


def on_reasoning_content(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if event.message_id not in run.open_reasoning:
        raise violation("AGUI401", f"REASONING_MESSAGE_CONTENT for {event.message_id!r} not open")
    if event.delta:
        ctx.reasoning_delta(event.message_id, event.delta)


def on_reasoning_end(run: AguiRun, ctx: RunContext, event: Any) -> None:
    if event.message_id not in run.open_reasoning:
        raise violation("AGUI401", f"REASONING_MESSAGE_END for {event.message_id!r} not open")
    run.open_reasoning.discard(event.message_id)
    ctx.complete_reasoning(event.message_id)


def on_reasoning_encrypted(run: AguiRun, ctx: RunContext, event: Any) -> None:
    values = ctx.transcript.setdefault("encryptedValues", {})
    values[event.entity_id] = {"subtype": event.subtype, "value": event.encrypted_value}
    while len(values) > _TRANSCRIPT_LIMIT:
        values.pop(next(iter(values)))


# -- steps and subagents (tasks) ----------------------------------------------------------------


def on_step_started(run: AguiRun, ctx: RunContext, event: Any) -> None:
    run.step_count += 1
    ident = f"step_{run.step_count}"
    run.steps.setdefault(event.step_name, []).append(ident)
    ctx.create_task(ident, event.step_name, meta={"agui": "step"})
    ctx.update_task(ident)  # a started step is running


def on_step_finished(run: AguiRun, ctx: RunContext, event: Any) -> None:
    open_ids = run.steps.get(event.step_name)
    if not open_ids:
        raise violation("AGUI006", f"STEP_FINISHED {event.step_name!r} has no open STEP_STARTED")
    ctx.complete_task(open_ids.pop())


def on_subagent_started(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.subagent_run_id
    if ident in run.subagents:
        raise violation("AGUI601", f"SUBAGENT_STARTED reuses subagentRunId {ident!r}")
    run.subagents.add(ident)
    run.open_subagents.add(ident)
    title = getattr(event, "name", None) or ident
    ctx.create_task(ident, str(title), meta={"agui": "subagent"})
    ctx.update_task(ident)


def on_subagent_finished(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.subagent_run_id
    if ident not in run.open_subagents:
        raise violation("AGUI602", f"SUBAGENT_FINISHED for {ident!r} with no open start")
    run.open_subagents.discard(ident)
    outcome = getattr(event, "outcome", None)
    ctx.complete_task(ident, _dump(outcome) if outcome is not None else None)


def on_subagent_error(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ident = event.subagent_run_id
    if ident not in run.open_subagents:
        raise violation("AGUI603", f"SUBAGENT_ERROR for {ident!r} with no open start")
    run.open_subagents.discard(ident)
    message = getattr(event, "message", None) or "The subagent failed."
    ctx.fail_task(ident, {"code": "upstream_error", "message": message})


# -- extension data -----------------------------------------------------------------------------


def _publish_state(run: AguiRun, ctx: RunContext) -> None:
    ctx.transcript["state"] = run.state
    ctx.extension("agui.state", run.state)


def on_state_snapshot(run: AguiRun, ctx: RunContext, event: Any) -> None:
    run.state = event.snapshot
    run.has_state = True
    _publish_state(run, ctx)


def on_state_delta(run: AguiRun, ctx: RunContext, event: Any) -> None:
    base = run.state if run.has_state else {}  # AGUI301 (delta before snapshot) is info only
    try:
        run.state = apply_patch(base, [_dump(op) for op in event.delta])
    except JsonPatchError as exc:
        raise violation("AGUI302", f"STATE_DELTA failed to apply: {exc}") from None
    run.has_state = True
    _publish_state(run, ctx)


def on_messages_snapshot(run: AguiRun, ctx: RunContext, event: Any) -> None:
    messages = [_dump(message) for message in event.messages]
    ctx.transcript["messages"] = messages
    ctx.extension("agui.messages", messages)


def on_activity_snapshot(run: AguiRun, ctx: RunContext, event: Any) -> None:
    current = run.activity.get(event.message_id)
    if current is not None and event.replace is False:
        return  # replace: false keeps an existing activity
    run.activity[event.message_id] = {"activityType": event.activity_type, "content": event.content}
    ctx.extension("agui.activity", dict(run.activity))


def on_activity_delta(run: AguiRun, ctx: RunContext, event: Any) -> None:
    current = run.activity.get(event.message_id)
    content = current["content"] if current is not None else {}
    try:
        patched = apply_patch(content, [_dump(op) for op in event.patch])
    except JsonPatchError as exc:
        raise violation("AGUI302", f"ACTIVITY_DELTA failed to apply: {exc}") from None
    run.activity[event.message_id] = {"activityType": event.activity_type, "content": patched}
    ctx.extension("agui.activity", dict(run.activity))


def on_custom_or_raw(run: AguiRun, ctx: RunContext, event: Any) -> None:
    ctx.extension("agui.custom", _dump(event))


HANDLERS: dict[str, Handler] = {
    "RUN_STARTED": on_run_started,
    "RUN_FINISHED": on_run_finished,
    "RUN_ERROR": on_run_error,
    "TEXT_MESSAGE_START": on_text_start,
    "TEXT_MESSAGE_CONTENT": on_text_content,
    "TEXT_MESSAGE_END": on_text_end,
    "TOOL_CALL_START": on_tool_start,
    "TOOL_CALL_ARGS": on_tool_args,
    "TOOL_CALL_END": on_tool_end,
    "TOOL_CALL_RESULT": on_tool_result,
    "REASONING_START": on_reasoning_span,
    "REASONING_END": on_reasoning_span,
    "REASONING_MESSAGE_START": on_reasoning_start,
    "REASONING_MESSAGE_CONTENT": on_reasoning_content,
    "REASONING_MESSAGE_END": on_reasoning_end,
    "REASONING_ENCRYPTED_VALUE": on_reasoning_encrypted,
    "STEP_STARTED": on_step_started,
    "STEP_FINISHED": on_step_finished,
    "SUBAGENT_STARTED": on_subagent_started,
    "SUBAGENT_FINISHED": on_subagent_finished,
    "SUBAGENT_ERROR": on_subagent_error,
    "STATE_SNAPSHOT": on_state_snapshot,
    "STATE_DELTA": on_state_delta,
    "MESSAGES_SNAPSHOT": on_messages_snapshot,
    "ACTIVITY_SNAPSHOT": on_activity_snapshot,
    "ACTIVITY_DELTA": on_activity_delta,
    "CUSTOM": on_custom_or_raw,
    "RAW": on_custom_or_raw,
}


def handle_event(run: AguiRun, ctx: RunContext, event: Any) -> None:
    """Check the response lifecycle, then dispatch to the event's handler."""
    kind = event.type.value if hasattr(event.type, "value") else str(event.type)
    response = run.response
    if kind != "RUN_STARTED":
        if not response.started:
            raise violation("AGUI001", f"first event of the run is {kind}, not RUN_STARTED")
        if response.finished and kind not in ("RUN_FINISHED", "RUN_ERROR"):
            raise violation("AGUI004", f"{kind} follows the run's terminal event")
    handler = HANDLERS.get(kind)
    if handler is None:
        raise violation("AGUI503", f"unknown event type {kind!r}")
    handler(run, ctx, event)
