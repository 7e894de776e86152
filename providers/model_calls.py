"""The base and helpers of the model-API providers (OpenAI Chat, OpenAI Responses, Anthropic).

A gateway run may span several model calls (a tool round trip): each call is one upstream
request built from ``ctx.history`` (plus the provider transcript), usage is summed over the
calls, and ``run.completed`` carries the normalised usage with the raw upstream usage in
``meta``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypedDict, TypeVar

import orjson

from providers.base import ProviderBase, standard_capabilities
from providers.context import RunContext
from providers.contract import AgentEvent, AgentTransport, Command, RunOptions
from providers.mcp import McpSettings, McpTools
from providers.mcp.context import McpRunContext
from providers.mcp.run import INTERNAL_COMMANDS
from providers.registry import network_transport
from providers.tracing import CallDescription
from providers.transports.request import UpstreamRequest
from providers.transports.sse import SSETransport

__all__ = [
    "ModelApiConfig",
    "ModelApiProvider",
    "ModelRun",
    "add_usage",
    "content_text",
    "finish_run",
    "parse_arguments",
]


class ModelApiConfig(TypedDict, total=False):
    url: str
    model: str | None
    headers: Mapping[str, str] | None
    params: Mapping[str, Any] | None
    transport: AgentTransport | None
    max_event_bytes: int | None
    mcp: McpSettings | None


CallT = TypeVar("CallT")


@dataclass(slots=True)
class ModelRun(Generic[CallT]):
    """One gateway run's model calls: their count, the current one, usage summed over them."""

    call: CallT
    calls: int = 0
    usage: dict[str, float | int] | None = None
    raw_usage: list[Any] = field(default_factory=list)


class ModelApiProvider(ProviderBase, Generic[CallT]):
    """The configuration every model-API provider takes (endpoint, model, headers, params) and
    the request cycle they share: each request (the first, and each continuation after the app
    answered) is ``build_body(ctx)`` POSTed to ``url`` and starts a new ``new_call(n)`` state.

    Subclasses set ``scratch_key`` and implement ``new_call`` and ``build_body``."""

    #: where the run's :class:`ModelRun` lives in ``ctx.scratch``
    scratch_key: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "transform_chunk" in vars(cls) and "transform_chunks" not in vars(cls):
            # It maps chunks its own way: the runner takes them one by one with it.
            setattr(cls, "transform_chunks", None)  # noqa: B010 (mypy: a method set to None)

    def __init__(
        self,
        id: str,
        *,
        url: str = "",
        model: str | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        transport: AgentTransport | None = None,
        max_event_bytes: int | None = None,
        mcp: McpSettings | None = None,
    ) -> None:
        transport = transport or SSETransport()
        super().__init__(id, transport, standard_capabilities([transport.kind]))
        self.url = url
        self.model = model
        self.headers = dict(headers or {})
        self.params = dict(params or {})
        self.max_event_bytes = max_event_bytes
        #: The MCP servers' tools this provider offers the model (``mcp_servers``), if any.
        self.mcp = McpTools(mcp) if mcp is not None and mcp.servers else None

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> Self:
        """Build the provider from its ``[providers.NAME]`` table (the registry's factory)."""
        return cls(
            name,
            url=str(config.get("url") or ""),
            model=config.get("model"),
            headers=config.get("headers") or {},
            params=config.get("params") or {},
            transport=network_transport(config),
            max_event_bytes=config.get("max_upstream_event_bytes"),
            mcp=config.get("mcp"),
        )

    # -- one model call per request -------------------------------------------------------------

    def new_call(self, number: int) -> CallT:
        """The mapping state of model call ``number`` (1-based; 0 before the first request)."""
        raise NotImplementedError

    def build_body(self, ctx: RunContext) -> dict[str, Any]:
        """The JSON body of the next request (history so far, this run's user turn, tools)."""
        raise NotImplementedError

    def create_context(self, options: RunOptions) -> RunContext:
        if self.mcp is None:
            return RunContext(options, self.id)
        return McpRunContext(options, self.id, self.mcp)

    def run_tools(self, ctx: RunContext) -> list[dict[str, Any]]:
        """The tools of the next model call: the run input's (the app's) and the MCP servers'."""
        tools = list(ctx.input.get("tools") or [])
        if self.mcp is not None:
            tools.extend(self.mcp.model_tools(ctx))
        return tools

    def model_run(self, ctx: RunContext) -> ModelRun[CallT]:
        run: ModelRun[CallT] | None = ctx.scratch.get(self.scratch_key)
        if run is None:
            run = ctx.scratch[self.scratch_key] = ModelRun(self.new_call(0))
        return run

    def next_request(self, ctx: RunContext) -> UpstreamRequest:
        body = self.build_body(ctx)
        run = self.model_run(ctx)
        run.calls += 1
        run.call = self.new_call(run.calls)
        limit = self.max_event_bytes or ctx.options.max_upstream_event_bytes
        return UpstreamRequest(self.url, body, self.headers, max_event_bytes=limit)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> UpstreamRequest:
        if self.mcp is not None:
            await self.mcp.prepare(ctx)
        return self.next_request(ctx)

    def transform_chunks(self, chunks: Iterable[Any], ctx: RunContext) -> list[AgentEvent]:
        """``transform_chunk`` of each chunk of one upstream read, the events in one list: the
        runner maps a read in one call (see BENCHMARKS.md, "Costs behind the code's
        shortcuts"). A model
        call queues no extension values, so nothing has to go out between two chunks."""
        handle = self.handle_chunk
        for chunk in chunks:
            handle(chunk, ctx)
        return ctx.take()

    async def prepare_continuation(self, ctx: RunContext) -> UpstreamRequest:
        if self.mcp is not None:
            await self.mcp.prepare(ctx)
        return self.next_request(ctx)

    # -- MCP server tools (providers.mcp.run) ----------------------------------------------------

    def apply_command(self, command: Command, ctx: RunContext) -> bool:
        if command.type in INTERNAL_COMMANDS and self.mcp is not None:
            return self.mcp.apply_internal(command, ctx)
        return super().apply_command(command, ctx)

    def on_command(self, command: Command, ctx: RunContext) -> None:
        if self.mcp is not None:
            self.mcp.on_command(command, ctx)

    def transform_error(self, error: BaseException, ctx: RunContext) -> list[AgentEvent]:
        if self.mcp is not None:
            self.mcp.cancel(ctx)
        return super().transform_error(error, ctx)

    def user_content(self, ctx: RunContext, history: list[dict[str, Any]] | None = None) -> Any:
        """This run's user turn for the first request, unless the history already ends with it
        (``None`` on continuations: the history then holds it). ``history``: ``ctx.history``,
        when the caller has it already (it replays the run's events)."""
        if self.model_run(ctx).calls:
            return None
        if history is None:
            history = ctx.history
        if history and history[-1].get("role") == "user":
            return None
        content = ctx.input.get("content")
        return content if isinstance(content, str | list) else ctx.input.get("prompt")

    def request_params(self, ctx: RunContext) -> dict[str, Any]:
        """The configured ``params``, overridden by the run input's ``params``."""
        return {**self.params, **(ctx.input.get("params") or {})}

    def record_usage(
        self, ctx: RunContext, raw: Mapping[str, Any], normalised: Mapping[str, float | int]
    ) -> None:
        """Add one model call's usage to the run's sum (``ctx.usage``); keep the raw usage."""
        run = self.model_run(ctx)
        run.raw_usage.append(dict(raw))
        run.usage = add_usage(run.usage, normalised)
        ctx.usage = run.usage

    def describe_call(
        self,
        ctx: RunContext,
        response_id: str | None,
        response_model: str | None,
        finish_reasons: Iterable[str],
        usage: Mapping[str, float | int] | None,
    ) -> None:
        """Tell the run's tracer (if any) what the call just read answered: its span's
        ``gen_ai.response.*`` and ``gen_ai.usage.*`` (normalised ``usage``, protocol.md §10)."""
        tracing = ctx.options.tracing
        if tracing is None:
            return
        tokens = usage or {}
        input_tokens, output_tokens = tokens.get("inputTokens"), tokens.get("outputTokens")
        tracing.describe_call(
            CallDescription(
                response_id=response_id if isinstance(response_id, str) else None,
                response_model=response_model if isinstance(response_model, str) else None,
                finish_reasons=tuple(finish_reasons),
                input_tokens=None if input_tokens is None else int(input_tokens),
                output_tokens=None if output_tokens is None else int(output_tokens),
            )
        )

    def complete_run(self, ctx: RunContext) -> None:
        """:func:`finish_run` with the raw usage of every model call of the run."""
        finish_run(ctx, raw_usage=self.model_run(ctx).raw_usage)


def content_text(content: Any) -> str:
    """The text of AgentMessageContent (text parts joined); other values as JSON text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return orjson.dumps(content).decode()


def add_usage(
    total: Mapping[str, float | int] | None, usage: Mapping[str, float | int]
) -> dict[str, float | int]:
    merged = dict(total or {})
    for key, value in usage.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def parse_arguments(arguments: str) -> tuple[bool, Any]:
    """(ok, value) for a tool's accumulated argument text; empty text is ``{}``."""
    if not arguments.strip():
        return True, {}
    try:
        return True, orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False, None


def finish_run(ctx: RunContext, *, raw_usage: list[Any] | None = None) -> None:
    """Close what is open by the "flush" column; ``run.completed`` unless something waits.

    Like ``RunContext.finish`` but the raw upstream usage goes into ``meta`` (§10)."""
    if ctx.ended:
        return
    ctx.close_open("flush")
    if ctx.is_waiting():
        return
    payload: dict[str, Any] = {}
    if ctx.output is not None:
        payload["output"] = ctx.output
    if ctx.usage is not None:
        payload["usage"] = dict(ctx.usage)
    meta = {"usage": raw_usage} if raw_usage else None
    ctx.emit("run.completed", payload, meta=meta)
