"""``agent-event``: a native upstream that already speaks AgentEvent 0.1 (protocol.md §10).

SSE: ``POST url`` with ``{sessionId, runId, input, history}`` answers a stream of envelopes (one
per SSE ``data``); once nothing of the turn waits any more, the continuation is a new ``POST``
with the same body plus ``commands`` (every command since the last request, in order).

WebSocket: the first frame is that request; events arrive one per frame; each command is sent as
it arrives as ``{"command": {type, payload}}`` on the same socket and the run continues there.
Reading pauses (the socket stays open) while the run waits on the app.

Every upstream event is validated and re-stamped into the gateway's run (upstream ids in
``meta.upstream``, see :mod:`providers.restamp`); anything invalid fails the run with
``upstream_protocol_error``; an unparsable chunk with ``upstream_malformed_chunk``; a stream that
ends with nothing waiting and no run terminal with ``upstream_dropped``. The gateway's provider
emits ``tool.completed`` / ``approval.resolved`` itself when it accepts a command.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from providers.base import ProviderBase
from providers.context import RunContext
from providers.contract import AgentEvent, AgentProvider, AgentTransport, Command
from providers.errors import AbortError, UpstreamDropped, UpstreamMalformedChunk
from providers.registry import network_transport, register_kind
from providers.restamp import Restamper
from providers.transports import ChannelTurn, UpstreamRequest, WebSocketChannel, WebSocketTransport

__all__ = ["AgentEventProvider"]


class AgentEventProvider(ProviderBase):
    def __init__(
        self,
        id: str,
        url: str,
        transport: AgentTransport,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(id, transport)
        self.url = url
        self.headers = dict(headers or {})

    # -- requests -------------------------------------------------------------------------------

    def _request(self, ctx: RunContext, body: Mapping[str, Any]) -> UpstreamRequest:
        return UpstreamRequest(
            self.url,
            json=dict(body),
            headers=self.headers,
            max_event_bytes=ctx.options.max_upstream_event_bytes,
        )

    def _turn(self, ctx: RunContext, channel: WebSocketChannel, send: Any = None) -> ChannelTurn:
        return ChannelTurn(channel, send=send, until=lambda: ctx.ended or ctx.is_waiting())

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        ctx.scratch["restamp"] = Restamper()
        body = {
            "sessionId": ctx.session_id,
            "runId": ctx.run_id,
            "input": dict(input),
            "history": ctx.history,
        }
        ctx.scratch["body"] = body
        request = self._request(ctx, body)
        if isinstance(self.transport, WebSocketTransport):
            channel = await self.transport.connect(request, ctx.signal)
            ctx.scratch["channel"] = channel
            return self._turn(ctx, channel)
        return request

    async def prepare_continuation(self, ctx: RunContext) -> Any:
        body = {**ctx.scratch["body"], "commands": list(ctx.commands_since_request)}
        return self._request(ctx, body)

    # -- chunks ---------------------------------------------------------------------------------

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        data = chunk.data if isinstance(chunk, ServerSentEvent) else chunk
        if isinstance(data, str | bytes):
            if not data.strip():
                return
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise UpstreamMalformedChunk(
                    "The upstream sent a chunk that is not JSON."
                ) from None
        restamper: Restamper = ctx.scratch["restamp"]
        restamper.apply(data, ctx)

    def on_upstream_end(self, ctx: RunContext) -> None:
        if not ctx.ended and not ctx.is_waiting():
            raise UpstreamDropped("The upstream stream ended without a run terminal.")

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        channel: WebSocketChannel | None = ctx.scratch.get("channel")
        if channel is not None and not channel.closed and not ctx.ended and ctx.is_waiting():
            return ctx.take()  # paused: the run continues on this socket after a command
        events = super().flush(ctx)
        self._close_channel(ctx)
        return events

    def transform_error(self, error: BaseException, ctx: RunContext) -> list[AgentEvent]:
        events = super().transform_error(error, ctx)
        self._close_channel(ctx)
        return events

    def _close_channel(self, ctx: RunContext) -> None:
        channel: WebSocketChannel | None = ctx.scratch.get("channel")
        if channel is not None and ctx.ended:
            channel.close_now()

    # -- commands -------------------------------------------------------------------------------

    async def execute_command(self, command: Command, ctx: RunContext) -> AsyncIterator[AgentEvent]:
        channel: WebSocketChannel | None = ctx.scratch.get("channel")
        if channel is None:
            async for event in super().execute_command(command, ctx):
                yield event
            return
        if command.type == "run.cancel":
            raise AbortError("aborted")
        if not self.apply_command(command, ctx):
            return
        for event in ctx.take():
            yield event
        await channel.send({"command": {"type": command.type, "payload": dict(command.payload)}})
        if ctx.ended or ctx.is_waiting():
            return
        async for event in self.stream(self._turn(ctx, channel), ctx):
            yield event


def _factory(name: str, config: Mapping[str, Any]) -> AgentProvider:
    url = config.get("url")
    if not isinstance(url, str) or not url:
        raise ValueError(f'Provider "{name}" (kind agent-event) needs a "url".')
    headers = config.get("headers") or {}
    return AgentEventProvider(
        name,
        url,
        network_transport(config),
        headers={str(k): str(v) for k, v in dict(headers).items()},
    )


register_kind("agent-event", _factory)
