"""``anthropic-messages``: the Anthropic Messages API, streamed over SSE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import orjson

from providers.anthropic_messages.mapping import AnthropicCall, close_blocks, handle_event
from providers.anthropic_messages.request import build_messages_request, remember_assistant_turn
from providers.anthropic_messages.usage import normalise_anthropic_usage
from providers.context import RunContext
from providers.contract import AgentEvent, Command
from providers.errors import UpstreamDropped, UpstreamMalformedChunk
from providers.model_calls import ModelApiConfig, ModelApiProvider, add_usage, finish_run
from providers.transports.request import UpstreamRequest

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessagesProvider"]

ANTHROPIC_VERSION = "2023-06-01"
_SCRATCH = "anthropic-messages"
#: internal command: resend the paused assistant turn (``stop_reason: pause_turn``)
CONTINUE_COMMAND = "anthropic.continue"
MAX_PAUSE_CONTINUATIONS = 8


def decode_event(chunk: Any) -> Mapping[str, Any]:
    """One SSE event (``event:`` + ``data:``) → its JSON payload (``type`` from the data, else
    from the ``event:`` name)."""
    data = getattr(chunk, "data", chunk)
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if not isinstance(data, str):
        raise TypeError(f"unexpected upstream chunk {type(chunk).__name__}")
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamMalformedChunk("The upstream sent an event that is not JSON.") from None
    if not isinstance(payload, dict):
        raise UpstreamMalformedChunk("The upstream sent an event that is not a JSON object.")
    name = getattr(chunk, "event", None)
    if "type" not in payload and isinstance(name, str) and name != "message":
        payload["type"] = name
    return payload


class AnthropicMessagesProvider(ModelApiProvider):
    """``tool_use`` goes to the app (§9); after ``tool.submit_result`` the next model call
    carries the assistant turn's raw blocks (thinking signatures included, from the transcript)
    and the ``tool_result`` blocks, within the same run."""

    def __init__(self, id: str = "anthropic-messages", **config: Unpack[ModelApiConfig]) -> None:
        super().__init__(id, **config)
        self.headers = {"anthropic-version": ANTHROPIC_VERSION, **self.headers}

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        input = ctx.input
        history = ctx.history
        user: Any = None
        if _state(ctx)["calls"] == 0 and (not history or history[-1].get("role") != "user"):
            content = input.get("content")
            user = content if isinstance(content, str | list) else input.get("prompt")
        return build_messages_request(
            model=self.model,
            history=history,
            transcript=ctx.transcript,
            user_content=user,
            tools=input.get("tools") or [],
            params={**self.params, **(input.get("params") or {})},
        )

    def _request(self, ctx: RunContext) -> UpstreamRequest:
        body = self.build_body(ctx)
        state = _state(ctx)
        state["calls"] += 1
        state["call"] = AnthropicCall(state["calls"])
        limit = self.max_event_bytes or ctx.options.max_upstream_event_bytes
        return UpstreamRequest(self.url, body, self.headers, max_event_bytes=limit)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> UpstreamRequest:
        return self._request(ctx)

    async def prepare_continuation(self, ctx: RunContext) -> UpstreamRequest:
        return self._request(ctx)

    def apply_command(self, command: Command, ctx: RunContext) -> bool:
        if command.type == CONTINUE_COMMAND:
            return True  # nothing to emit: the continuation request follows
        return super().apply_command(command, ctx)

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        handle_event(_state(ctx)["call"], ctx, decode_event(chunk))

    def on_upstream_end(self, ctx: RunContext) -> None:
        state = _state(ctx)
        call: AnthropicCall = state["call"]
        if not call.stopped:
            raise UpstreamDropped("The message stream ended without message_stop.")
        close_blocks(call, ctx)
        remember_assistant_turn(ctx.transcript, call.raw_blocks)
        output: dict[str, Any] = {"stopReason": call.stop_reason or "end_turn"}
        if call.stop_details is not None:
            output["stopDetails"] = call.stop_details
        ctx.output = output
        if call.usage:
            state["raw"].append(call.usage)
            state["usage"] = add_usage(state["usage"], normalise_anthropic_usage(call.usage))
            ctx.usage = state["usage"]

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            state = _state(ctx)
            paused = state["call"].stop_reason == "pause_turn" and not ctx.is_waiting()
            if paused and state["pauses"] < MAX_PAUSE_CONTINUATIONS:
                # a server tool loop was paused: continue it with the assistant turn so far
                state["pauses"] += 1
                ctx.options.commands.put_nowait(Command(CONTINUE_COMMAND, {}))
                return ctx.take()
            if not ctx.is_waiting():
                # a server tool whose result is still to come only ends with the run
                finish_run(ctx, raw_usage=_state(ctx)["raw"])
        return ctx.take()


def _state(ctx: RunContext) -> dict[str, Any]:
    state: dict[str, Any] = ctx.scratch.setdefault(
        _SCRATCH, {"calls": 0, "usage": None, "raw": [], "call": AnthropicCall(0), "pauses": 0}
    )
    return state
