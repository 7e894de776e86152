"""ProviderBase: the bookkeeping every provider would otherwise repeat.

Subclasses set ``id``, ``capabilities`` and ``transport`` (the constructor takes them) and
implement:

- ``async prepare_request(input, ctx)`` — the first upstream request;
- ``handle_chunk(chunk, ctx) -> None`` — map one upstream chunk with the ``ctx`` helpers
  (see :mod:`providers.context`); raise a :class:`providers.errors.ProviderError` for an
  upstream failure (``UpstreamMalformedChunk``, ``UpstreamError`` ...);

and may override:

- ``on_start(input, ctx)`` — extra events right after the run's opening events;
- ``on_upstream_end(ctx)`` — the upstream stream ended: set ``ctx.output``/``ctx.usage``, or
  raise ``UpstreamDropped`` when the stream lacked its terminator; the base then closes what is
  open by the "flush" column and emits ``run.completed`` unless something waits on the app;
- ``async prepare_continuation(ctx)`` — after a command, once nothing waits any more: the next
  upstream request (next model call with ``ctx.history``, AG-UI ``resume`` ...), or ``None``
  to finish the run now (default);
- ``on_command(command, ctx)`` — extra command handling; the base applies the standard
  commands (``approval.resolve``, ``approval.expire``, ``tool.submit_result``, ``tool.retry``).

The base owns ``start`` (``session.started`` on the first run with the title, ``run.started``,
the user message unless ``RunOptions.emit_user_message`` is False), ``transform_chunk``,
``flush``, ``transform_error`` (abort → ``run.cancelled``, ``WaitTimeout`` → wait-timeout
closure and ``run.failed wait_timeout``, anything else → ``run.failed`` with the registry
code), all by the closure table of protocol.md §6, in reverse order of opening. A provider
written on it cannot end a run with an open entity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from core.events import EVENT_TYPE_LIST
from providers.closure import is_waiting
from providers.context import MISSING, RunContext
from providers.contract import (
    AGENT_EVENT_PROTOCOL,
    AgentEvent,
    AgentTransport,
    Capabilities,
    Command,
    RunOptions,
)
from providers.errors import AbortError, ProviderError, WaitTimeout
from providers.tracing import start_call

__all__ = ["STANDARD_COMMANDS", "ProviderBase", "standard_capabilities"]

STANDARD_COMMANDS: tuple[str, ...] = (
    "approval.resolve",
    "tool.submit_result",
    "tool.retry",
    "run.cancel",
)


def standard_capabilities(
    transports: Iterable[str],
    *,
    extensions: Iterable[str] = (),
    commands: Iterable[str] = STANDARD_COMMANDS,
    resumable: bool = False,
) -> Capabilities:
    """Capabilities declaring every standard event type (what the base may emit)."""
    return Capabilities(
        event_types=EVENT_TYPE_LIST,
        transports=tuple(transports),
        extensions=tuple(extensions),
        commands=tuple(commands),
        resumable=resumable,
    )


class ProviderBase:
    protocol: Mapping[str, str] = AGENT_EVENT_PROTOCOL

    def __init__(
        self,
        id: str,
        transport: AgentTransport,
        capabilities: Capabilities | None = None,
    ) -> None:
        self.id = id
        self.transport = transport
        self.capabilities = capabilities or standard_capabilities([transport.kind])

    # -- contract -------------------------------------------------------------------------------

    def create_context(self, options: RunOptions) -> RunContext:
        return RunContext(options, self.id)

    def start(self, input: Mapping[str, Any], ctx: RunContext) -> list[AgentEvent]:
        ctx.begin(input)
        self.on_start(input, ctx)
        return ctx.take()

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        raise NotImplementedError

    def transform_chunk(self, chunk: Any, ctx: RunContext) -> list[AgentEvent]:
        self.handle_chunk(chunk, ctx)
        return ctx.take()

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            ctx.finish()
        return ctx.take()

    def transform_error(self, error: BaseException, ctx: RunContext) -> list[AgentEvent]:
        # Events queued before the failure were numbered by the factory: emit them first.
        if isinstance(error, AbortError):
            ctx.cancel(error.reason)
        elif ctx.signal.aborted:
            ctx.cancel(ctx.signal.reason or "aborted")
        elif isinstance(error, WaitTimeout):
            ctx.time_out(error)
        else:
            ctx.fail(error)
        return ctx.take()

    async def execute_command(self, command: Command, ctx: RunContext) -> AsyncIterator[AgentEvent]:
        """Apply a command (§9); once nothing waits, continue the run (or finish it)."""
        if command.type == "run.cancel":
            raise AbortError("aborted")
        if not self.apply_command(command, ctx):
            return  # stale: its target no longer waits (the gateway normally refuses these)
        self.on_command(command, ctx)
        for event in ctx.take():
            yield event
        if ctx.ended or ctx.is_waiting():
            return
        request = await self.prepare_continuation(ctx)
        if request is None:
            ctx.finish()
            for event in ctx.take():
                yield event
            return
        ctx.commands_since_request.clear()
        async for event in self.stream(request, ctx):
            yield event

    async def stream(self, request: Any, ctx: RunContext) -> AsyncIterator[AgentEvent]:
        """One more upstream request of the same run: its chunks, then the flush."""
        tracing = ctx.options.tracing
        if tracing is not None:  # the model call's span (providers/tracing.py)
            request = start_call(tracing, request)
        async for chunk in self.transport.open(request, ctx.signal):
            for event in self.transform_chunk(chunk, ctx):
                yield event
            if ctx.signal.aborted:
                raise AbortError.from_signal(ctx.signal)
        for event in self.flush(ctx):
            yield event
        if tracing is not None:
            tracing.end_call()

    # -- hooks ----------------------------------------------------------------------------------

    def on_start(self, input: Mapping[str, Any], ctx: RunContext) -> None:
        return None

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        raise NotImplementedError

    def on_upstream_end(self, ctx: RunContext) -> None:
        return None

    async def prepare_continuation(self, ctx: RunContext) -> Any:
        return None

    def on_command(self, command: Command, ctx: RunContext) -> None:
        return None

    # -- standard commands ----------------------------------------------------------------------

    def apply_command(self, command: Command, ctx: RunContext) -> bool:
        """Emit what the command decides; False (nothing emitted) when its target no longer
        waits: an approval not open, a tool not handed to the app, a tool not failed."""
        payload = command.payload
        if command.type in ("approval.resolve", "approval.expire"):
            approval_id = _str(payload, "approvalId")
            if not ctx.is_open("approval", approval_id):
                return False
            if command.type == "approval.expire":
                ctx.resolve_approval(approval_id, "expired")
            else:
                decision = _str(payload, "decision")
                ctx.resolve_approval(approval_id, decision, payload.get("data", MISSING))
        elif command.type == "tool.submit_result":
            tool_call_id = _str(payload, "toolCallId")
            entity = ctx.entity("tool", tool_call_id)
            if entity is None or not is_waiting(entity):
                return False
            result = payload.get("result")
            if payload.get("isError"):
                message = result if isinstance(result, str) and result else "The tool failed."
                ctx.fail_tool(tool_call_id, {"message": message, "details": {"result": result}})
            else:
                ctx.complete_tool(tool_call_id, result)
        elif command.type == "tool.retry":
            record = ctx.tool(_str(payload, "toolCallId"))
            if record is None or record.status != "failed":
                return False
            self.retry_tool(record.id, ctx)
        elif command.type not in self.capabilities.commands:
            raise ProviderError(f'Provider "{self.id}" does not support command "{command.type}".')
        ctx.commands_since_request.append({"type": command.type, "payload": dict(payload)})
        return True

    def retry_tool(self, tool_call_id: str, ctx: RunContext) -> None:
        """``tool.retry``: a new ``tool.requested`` (new id, ``attempt`` + 1, ``retryOf``).
        An app-executed tool is handed to the app again at once."""
        record = ctx.tool(tool_call_id)
        if record is None:
            raise ProviderError(f'Tool "{tool_call_id}" is not part of this run.')
        attempt = record.attempt + 1
        new_id = f"{tool_call_id.split('~retry')[0]}~retry{attempt}"
        ctx.request_tool(
            new_id,
            record.name,
            record.arguments,
            index=record.index,
            executor=record.executor,
            attempt=attempt,
            retry_of=tool_call_id,
        )
        if record.executor == "app":
            ctx.tool_running(new_id)


def _str(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise ProviderError(f'Command payload lacks "{key}".')
    return value
