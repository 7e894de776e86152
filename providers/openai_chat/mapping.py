"""Map decoded Chat Completions chunks onto the run context (protocol.md §10).

One model call = one upstream response. Per choice: one assistant message (its ``content``,
and its ``refusal`` as content with ``meta.refusal``), one reasoning entity per reasoning span
(``reasoning_content`` / ``reasoning`` / Mistral ``thinking`` parts), and tool calls keyed by
``(choice, index)``: id and name come from the first delta that has them and are never
overwritten (a later ``"name": ""`` is ignored); arguments arriving before the name are
buffered. Tool calls are executed by the app (§9): ``meta.executor = "app"``, then
``tool.running`` once the choice finishes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from providers.context import RunContext
from providers.errors import UpstreamProtocolError
from providers.model_calls import parse_arguments
from providers.openai_chat.chunks import (
    ChatChunk,
    Segment,
    ToolCallDelta,
    decode_chunk,
    decode_payload,
    load_payload,
    streamed_text,
)

__all__ = ["ModelCall", "apply_chunk", "apply_data", "finish_choice"]

TRUNCATED = "truncated_arguments"


@dataclass(slots=True)
class ToolState:
    choice: int
    index: int
    id: str | None = None
    name: str | None = None
    buffered: list[str] = field(default_factory=list)
    requested: bool = False
    arguments: str = ""


@dataclass(slots=True)
class ChoiceState:
    message_id: str
    message_open: bool = False
    refusal: bool = False
    reasoning_id: str | None = None
    reasoning_count: int = 0
    finished: bool = False
    reasoning_details: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class ModelCall:
    """The state of one model call (one upstream response) of a run."""

    number: int
    choices: dict[int, ChoiceState] = field(default_factory=dict)
    tools: dict[tuple[int, int], ToolState] = field(default_factory=dict)
    finish_reasons: dict[int, str] = field(default_factory=dict)
    usage: Any = None
    done: bool = False
    upstream_id: str | None = None
    model: str | None = None

    def choice(self, index: int) -> ChoiceState:
        state = self.choices.get(index)
        if state is None:
            state = ChoiceState(message_id=f"msg_{self.number}" + (f"_{index}" if index else ""))
            self.choices[index] = state
        return state

    def meta(self, index: int) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.model:
            meta["model"] = self.model
        if self.upstream_id:
            meta["upstreamId"] = self.upstream_id
        if index:
            meta["choice"] = index
        return meta


def _details_meta(state: ChoiceState) -> dict[str, Any] | None:
    if not state.reasoning_details:
        return None
    details, state.reasoning_details = state.reasoning_details, []
    return {"reasoningDetails": details}


def _close_reasoning(call: ModelCall, ctx: RunContext, index: int) -> None:
    state = call.choice(index)
    if state.reasoning_id is not None:
        ctx.complete_reasoning(state.reasoning_id, meta=_details_meta(state))
        state.reasoning_id = None


def _on_reasoning(call: ModelCall, ctx: RunContext, index: int, text: str) -> None:
    state = call.choice(index)
    if state.reasoning_id is None:
        state.reasoning_count += 1
        state.reasoning_id = f"rsn_{call.number}_{index}_{state.reasoning_count}"
        ctx.open_reasoning(state.reasoning_id, meta=call.meta(index) or None)
    ctx.reasoning_delta(state.reasoning_id, text)


def _open_message(call: ModelCall, ctx: RunContext, index: int, *, refusal: bool) -> ChoiceState:
    state = call.choice(index)
    if not state.message_open:
        meta = call.meta(index)
        if refusal:
            meta["refusal"] = True
        ctx.open_message(state.message_id, "assistant", meta=meta or None)
        state.message_open = True
        state.refusal = refusal
    return state


def _on_content(call: ModelCall, ctx: RunContext, index: int, text: str) -> None:
    _close_reasoning(call, ctx, index)
    state = _open_message(call, ctx, index, refusal=False)
    ctx.message_delta(state.message_id, text)


def _on_refusal(call: ModelCall, ctx: RunContext, index: int, text: str) -> None:
    _close_reasoning(call, ctx, index)
    state = _open_message(call, ctx, index, refusal=True)
    state.refusal = True
    ctx.message_delta(state.message_id, text)


SegmentHandler = Callable[[ModelCall, RunContext, int, str], None]
SEGMENT_HANDLERS: dict[str, SegmentHandler] = {
    "reasoning": _on_reasoning,
    "content": _on_content,
    "refusal": _on_refusal,
}


def _request(call: ModelCall, ctx: RunContext, tool: ToolState) -> None:
    assert tool.name is not None
    tool.id = tool.id or f"call_{call.number}_{tool.choice}_{tool.index}"
    meta = call.meta(tool.choice)
    ctx.request_tool(tool.id, tool.name, index=tool.index, executor="app", meta=meta or None)
    tool.requested = True
    for piece in tool.buffered:
        ctx.tool_arguments(tool.id, piece)
    tool.buffered.clear()


def _on_tool_delta(call: ModelCall, ctx: RunContext, index: int, delta: ToolCallDelta) -> None:
    _close_reasoning(call, ctx, index)
    key = (index, delta.index)
    tool = call.tools.get(key)
    if tool is None:
        tool = call.tools[key] = ToolState(index, delta.index)
    if delta.id and tool.id is None:
        tool.id = delta.id
    if delta.name and tool.name is None:
        tool.name = delta.name
    if delta.arguments:
        tool.arguments += delta.arguments
        if tool.requested:
            assert tool.id is not None
            ctx.tool_arguments(tool.id, delta.arguments)
        else:
            tool.buffered.append(delta.arguments)
    if not tool.requested and tool.name is not None:
        _request(call, ctx, tool)


def finish_choice(call: ModelCall, ctx: RunContext, index: int, reason: str | None) -> None:
    """The choice ended: close its reasoning and message; hand its complete tools to the app."""
    state = call.choice(index)
    if state.finished:
        return
    state.finished = True
    if reason is not None:
        call.finish_reasons[index] = reason
    _close_reasoning(call, ctx, index)
    if state.message_open:
        meta = _details_meta(state) or {}
        if state.refusal:
            meta["refusal"] = True
        ctx.complete_message(state.message_id, meta=meta or None)
        state.message_open = False
    for (choice, _), tool in call.tools.items():
        if choice != index:
            continue
        if not tool.requested:
            raise UpstreamProtocolError("A streamed tool call never received its name.")
        assert tool.id is not None
        ok, _ = parse_arguments(tool.arguments)
        if not ok:
            error = {
                "code": TRUNCATED if reason == "length" else "invalid_arguments",
                "message": "The tool call's arguments are not complete JSON.",
            }
            ctx.fail_tool(tool.id, error)
            continue
        if not tool.arguments.strip():
            ctx.tool_arguments(tool.id, "{}")
        ctx.tool_running(tool.id)


def apply_chunk(call: ModelCall, ctx: RunContext, chunk: ChatChunk) -> None:
    if chunk.done:
        call.done = True
        return
    call.upstream_id = call.upstream_id or chunk.id
    call.model = call.model or chunk.model
    if chunk.usage is not None:
        call.usage = chunk.usage
    for choice in chunk.choices:
        state = call.choice(choice.index)
        if state.finished and (choice.segments or choice.tool_calls):
            # Its message and tools are closed: a delta now could only reopen or grow a
            # finished entity, which the protocol forbids.
            raise UpstreamProtocolError(
                f"The upstream streamed into choice {choice.index} after its finish_reason."
            )
        state.reasoning_details.extend(choice.reasoning_details)
        for segment in choice.segments:
            _dispatch(call, ctx, choice.index, segment)
        for delta in choice.tool_calls:
            _on_tool_delta(call, ctx, choice.index, delta)
        if choice.finish_reason is not None:
            finish_choice(call, ctx, choice.index, choice.finish_reason)


def _dispatch(call: ModelCall, ctx: RunContext, index: int, segment: Segment) -> None:
    SEGMENT_HANDLERS[segment.kind](call, ctx, index, segment.text)


def apply_data(call: ModelCall, ctx: RunContext, data: str) -> None:
    """Map one SSE ``data`` payload: ``apply_chunk(call, ctx, decode_chunk(data))``, with the
    streamed-text chunk (nearly every chunk of an answer) taken straight to its delta."""
    if data[:1] != "{":
        apply_chunk(call, ctx, decode_chunk(data))
        return
    payload = load_payload(data)
    text = streamed_text(payload)
    if text is None:
        apply_chunk(call, ctx, decode_payload(payload))
        return
    index, content = text
    state = call.choices.get(index)
    if state is None or not state.message_open or state.reasoning_id is not None:
        # The first text of a message, text after reasoning or after the finish: the general
        # path, which opens, closes and refuses as it must.
        apply_chunk(call, ctx, decode_payload(payload))
        return
    # What apply_chunk does for this chunk, without the ChatChunk/ChoiceDelta/Segment objects
    # and the handler chain (BENCHMARKS.md, "Costs behind the code's shortcuts").
    if not call.upstream_id:
        call.upstream_id = payload.get("id") or None
    if not call.model:
        call.model = payload.get("model") or None
    if content:
        ctx.message_delta(state.message_id, content)
