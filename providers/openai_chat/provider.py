"""``openai-chat``: any OpenAI-compatible Chat Completions server, streamed over SSE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from providers.context import RunContext
from providers.contract import AgentEvent
from providers.errors import UpstreamDropped
from providers.model_calls import ModelApiConfig, ModelApiProvider, add_usage, finish_run
from providers.openai_chat.chunks import decode_chunk
from providers.openai_chat.mapping import ModelCall, apply_chunk, finish_choice
from providers.openai_chat.request import build_chat_request
from providers.openai_chat.usage import normalise_openai_usage
from providers.transports.request import UpstreamRequest

__all__ = ["OpenAIChatProvider"]

_SCRATCH = "openai-chat"


def _chunk_data(chunk: Any) -> str:
    data = getattr(chunk, "data", chunk)
    if isinstance(data, bytes):
        return data.decode("utf-8")
    if not isinstance(data, str):
        raise TypeError(f"unexpected upstream chunk {type(chunk).__name__}")
    return data


class OpenAIChatProvider(ModelApiProvider):
    """Tool calls go to the app (§9); after ``tool.submit_result`` the next model call carries
    the assistant ``tool_calls`` message and the tool messages, within the same run."""

    def __init__(self, id: str = "openai-chat", **config: Unpack[ModelApiConfig]) -> None:
        super().__init__(id, **config)

    # -- requests -----------------------------------------------------------------------------

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        input = ctx.input
        history = ctx.history
        first_call = _calls(ctx) == 0
        user: Any = None
        if first_call and (not history or history[-1].get("role") != "user"):
            content = input.get("content")
            user = content if isinstance(content, str | list) else input.get("prompt")
        params = {**self.params, **(input.get("params") or {})}
        tools = input.get("tools") or []
        return build_chat_request(
            model=self.model, history=history, user_content=user, tools=tools, params=params
        )

    def _request(self, ctx: RunContext) -> UpstreamRequest:
        body = self.build_body(ctx)
        state = ctx.scratch.setdefault(_SCRATCH, {"calls": 0, "usage": None, "raw": []})
        state["calls"] += 1
        state["call"] = ModelCall(state["calls"])
        limit = self.max_event_bytes or ctx.options.max_upstream_event_bytes
        return UpstreamRequest(self.url, body, self.headers, max_event_bytes=limit)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> UpstreamRequest:
        return self._request(ctx)

    async def prepare_continuation(self, ctx: RunContext) -> UpstreamRequest:
        return self._request(ctx)

    # -- chunks -------------------------------------------------------------------------------

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        call: ModelCall = ctx.scratch[_SCRATCH]["call"]
        apply_chunk(call, ctx, decode_chunk(_chunk_data(chunk)))

    def on_upstream_end(self, ctx: RunContext) -> None:
        state = ctx.scratch[_SCRATCH]
        call: ModelCall = state["call"]
        if not call.finish_reasons:
            raise UpstreamDropped("The response stream ended without a finish reason.")
        for index in list(call.choices):
            finish_choice(call, ctx, index, None)
        reasons = [call.finish_reasons[i] for i in sorted(call.finish_reasons)]
        output: dict[str, Any] = {"stopReason": reasons[0]}
        if len(reasons) > 1:
            output["stopReasons"] = reasons
        ctx.output = output
        if isinstance(call.usage, Mapping):
            state["raw"].append(dict(call.usage))
            state["usage"] = add_usage(state["usage"], normalise_openai_usage(call.usage))
            ctx.usage = state["usage"]

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            finish_run(ctx, raw_usage=ctx.scratch[_SCRATCH]["raw"])
        return ctx.take()


def _calls(ctx: RunContext) -> int:
    state = ctx.scratch.get(_SCRATCH)
    return int(state["calls"]) if state else 0
