"""``openai-responses``: the OpenAI Responses API (``POST …/v1/responses``), streamed over SSE."""

from __future__ import annotations

from typing import Any, Unpack

from providers.context import RunContext
from providers.contract import AgentEvent
from providers.errors import UpstreamDropped
from providers.model_calls import ModelApiConfig, ModelApiProvider
from providers.openai_responses.events import decode_event
from providers.openai_responses.mapping import ResponseCall, apply_event
from providers.openai_responses.request import build_responses_request, remember_response_turn
from providers.openai_responses.usage import normalise_responses_usage

__all__ = ["OpenAIResponsesProvider"]


class OpenAIResponsesProvider(ModelApiProvider[ResponseCall]):
    """Stateless use: the gateway keeps the history and every request carries it whole.
    Function calls go to the app (§9); after ``tool.submit_result`` the next model call
    carries the call items, their ``function_call_output`` items and the encrypted reasoning
    (from the transcript), within the same run."""

    scratch_key = "openai-responses"

    def __init__(self, id: str = "openai-responses", **config: Unpack[ModelApiConfig]) -> None:
        super().__init__(id, **config)

    def new_call(self, number: int) -> ResponseCall:
        return ResponseCall(number)

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        history = ctx.history  # derived from the run's events: once per request
        return build_responses_request(
            model=self.model,
            history=history,
            transcript=ctx.transcript,
            user_content=self.user_content(ctx, history),
            tools=self.run_tools(ctx),
            params=self.request_params(ctx),
        )

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        event = decode_event(chunk)
        if event is not None:  # ``[DONE]``: tolerated, the terminal event already came
            apply_event(self.model_run(ctx).call, ctx, event)

    def on_upstream_end(self, ctx: RunContext) -> None:
        call = self.model_run(ctx).call
        if not call.ended:
            raise UpstreamDropped("The response stream ended without its terminal event.")
        remember_response_turn(ctx.transcript, [call.raw_items[i] for i in sorted(call.raw_items)])
        reason = call.incomplete_reason or call.status
        ctx.output = {"stopReason": reason}
        usage = normalise_responses_usage(call.usage) if call.usage is not None else None
        if usage is not None:
            assert call.usage is not None
            self.record_usage(ctx, call.usage, usage)
        self.describe_call(ctx, call.response_id, call.model, [reason] if reason else [], usage)

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            self.complete_run(ctx)
        return ctx.take()
