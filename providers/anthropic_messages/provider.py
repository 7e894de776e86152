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
from providers.model_calls import ModelApiConfig, ModelApiProvider

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessagesProvider"]

ANTHROPIC_VERSION = "2023-06-01"
#: ``ctx.scratch`` key: how many paused turns this run continued
_PAUSES = "anthropic-messages.pauses"
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


class AnthropicMessagesProvider(ModelApiProvider[AnthropicCall]):
    """``tool_use`` goes to the app (§9); after ``tool.submit_result`` the next model call
    carries the assistant turn's raw blocks (thinking signatures included, from the transcript)
    and the ``tool_result`` blocks, within the same run."""

    scratch_key = "anthropic-messages"

    def __init__(self, id: str = "anthropic-messages", **config: Unpack[ModelApiConfig]) -> None:
        super().__init__(id, **config)
        self.headers = {"anthropic-version": ANTHROPIC_VERSION, **self.headers}

    def new_call(self, number: int) -> AnthropicCall:
        return AnthropicCall(number)

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        history = ctx.history  # derived from the run's events: once per request
        return build_messages_request(
            model=self.model,
            history=history,
            transcript=ctx.transcript,
            user_content=self.user_content(ctx, history),
            tools=self.run_tools(ctx),
            params=self.request_params(ctx),
        )

    def apply_command(self, command: Command, ctx: RunContext) -> bool:
        if command.type == CONTINUE_COMMAND:
            return True  # nothing to emit: the continuation request follows
        return super().apply_command(command, ctx)

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        handle_event(self.model_run(ctx).call, ctx, decode_event(chunk))

    def on_upstream_end(self, ctx: RunContext) -> None:
        call = self.model_run(ctx).call
        if not call.stopped:
            raise UpstreamDropped("The message stream ended without message_stop.")
        close_blocks(call, ctx)
        remember_assistant_turn(ctx.transcript, call.raw_blocks)
        output: dict[str, Any] = {"stopReason": call.stop_reason or "end_turn"}
        if call.stop_details is not None:
            output["stopDetails"] = call.stop_details
        ctx.output = output
        usage = None
        if call.usage:
            usage = normalise_anthropic_usage(call.usage)
            self.record_usage(ctx, call.usage, usage)
        reasons = [call.stop_reason] if call.stop_reason else []
        self.describe_call(ctx, call.upstream_id, call.model, reasons, usage)

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            paused = self.model_run(ctx).call.stop_reason == "pause_turn"
            pauses: int = ctx.scratch.get(_PAUSES, 0)
            if paused and not ctx.is_waiting() and pauses < MAX_PAUSE_CONTINUATIONS:
                # a server tool loop was paused: continue it with the assistant turn so far
                ctx.scratch[_PAUSES] = pauses + 1
                ctx.options.commands.put_nowait(Command(CONTINUE_COMMAND, {}))
                return ctx.take()
            if not ctx.is_waiting():
                # a server tool whose result is still to come only ends with the run
                self.complete_run(ctx)
        return ctx.take()
