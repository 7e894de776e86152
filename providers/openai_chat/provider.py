"""``openai-chat``: any OpenAI-compatible Chat Completions server, streamed over SSE."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from providers.context import RunContext
from providers.contract import AgentEvent
from providers.errors import UpstreamDropped
from providers.model_calls import ModelApiConfig, ModelApiProvider
from providers.openai_chat.mapping import ModelCall, apply_data, finish_choice
from providers.openai_chat.request import build_chat_request
from providers.openai_chat.usage import normalise_openai_usage

__all__ = ["OpenAIChatProvider"]


def _chunk_data(chunk: Any) -> str:
    data = getattr(chunk, "data", chunk)
    if type(data) is str:
        return data
    if isinstance(data, bytes):
        return data.decode("utf-8")
    if not isinstance(data, str):
        raise TypeError(f"unexpected upstream chunk {type(chunk).__name__}")
    return data


class OpenAIChatProvider(ModelApiProvider[ModelCall]):
    """Tool calls go to the app (§9); after ``tool.submit_result`` the next model call carries
    the assistant ``tool_calls`` message and the tool messages, within the same run."""

    scratch_key = "openai-chat"

    def __init__(self, id: str = "openai-chat", **config: Unpack[ModelApiConfig]) -> None:
        super().__init__(id, **config)

    def new_call(self, number: int) -> ModelCall:
        return ModelCall(number)

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        history = ctx.history  # derived from the run's events: once per request
        return build_chat_request(
            model=self.model,
            history=history,
            user_content=self.user_content(ctx, history),
            tools=self.run_tools(ctx),
            params=self.request_params(ctx),
        )

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        apply_data(self.model_run(ctx).call, ctx, _chunk_data(chunk))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "handle_chunk" in vars(cls) and "transform_chunks" not in vars(cls):
            # It maps chunks its own way: the read goes through its handle_chunk.
            setattr(cls, "transform_chunks", ModelApiProvider.transform_chunks)  # noqa: B010

    def transform_chunks(self, chunks: Iterable[Any], ctx: RunContext) -> list[AgentEvent]:
        """``handle_chunk`` of each chunk with the model call looked up once per read (only a
        new request, never a chunk, starts another call). A subclass with its own
        ``handle_chunk`` takes the base's loop over it instead (``__init_subclass__``)."""
        call = self.model_run(ctx).call
        for chunk in chunks:
            apply_data(call, ctx, _chunk_data(chunk))
        return ctx.take()

    def on_upstream_end(self, ctx: RunContext) -> None:
        call = self.model_run(ctx).call
        if not call.finish_reasons:
            raise UpstreamDropped("The response stream ended without a finish reason.")
        for index in list(call.choices):
            finish_choice(call, ctx, index, None)
        reasons = [call.finish_reasons[i] for i in sorted(call.finish_reasons)]
        output: dict[str, Any] = {"stopReason": reasons[0]}
        if len(reasons) > 1:
            output["stopReasons"] = reasons
        ctx.output = output
        usage = normalise_openai_usage(call.usage) if isinstance(call.usage, Mapping) else None
        if usage is not None:
            self.record_usage(ctx, call.usage, usage)
        self.describe_call(ctx, call.upstream_id, call.model, reasons, usage)

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            self.complete_run(ctx)
        return ctx.take()
