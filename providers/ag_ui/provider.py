"""``ag-ui``: an AG-UI agent over SSE (or WebSocket where the upstream offers it)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import orjson

from providers.ag_ui.mapping import AguiRun, UpstreamResponse, handle_event, violation
from providers.ag_ui.normalize import AguiNormalizer, parse_agui_event
from providers.ag_ui.request import build_run_agent_input
from providers.base import ProviderBase, standard_capabilities
from providers.context import RunContext
from providers.contract import AgentEvent, AgentTransport, Command
from providers.errors import UpstreamMalformedChunk
from providers.model_calls import finish_run
from providers.transports.request import UpstreamRequest
from providers.transports.sse import SSETransport

__all__ = ["AGUI_EXTENSIONS", "AguiProvider", "decode_agui_chunk"]

AGUI_EXTENSIONS = ("agui.state", "agui.activity", "agui.custom", "agui.messages")
_SCRATCH = "ag-ui"


def decode_agui_chunk(chunk: Any) -> dict[str, Any] | None:
    """An SSE event, a WebSocket text frame or an already-decoded dict → the raw event dict
    (``None`` for an empty keep-alive)."""
    if isinstance(chunk, Mapping):
        return dict(chunk)
    data = getattr(chunk, "data", chunk)
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if not isinstance(data, str):
        raise violation("AGUI502", f"unexpected chunk {type(chunk).__name__}")
    if not data.strip():
        return None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise violation("AGUI502", "event payload is not valid JSON") from None
    if not isinstance(raw, dict):
        raise violation("AGUI502", "event payload is not a JSON object")
    return raw


class AguiProvider(ProviderBase):
    """Frontend tools (the tools the app passed in ``input.tools``) are handed to the app and
    their results sent back in a new upstream request; interrupts become approvals resolved by
    ``approval.resolve`` and a new request with ``resume``; both stream into the same run."""

    def __init__(
        self,
        id: str = "ag-ui",
        *,
        url: str = "",
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        transport: AgentTransport | None = None,
        max_event_bytes: int | None = None,
    ) -> None:
        transport = transport or SSETransport(strict_fields=True)
        super().__init__(
            id, transport, standard_capabilities([transport.kind], extensions=AGUI_EXTENSIONS)
        )
        self.url = url
        self.headers = dict(headers or {})
        self.params = dict(params or {})
        self.max_event_bytes = max_event_bytes

    # -- requests -----------------------------------------------------------------------------

    def _run(self, ctx: RunContext) -> AguiRun:
        run = ctx.scratch.get(_SCRATCH)
        if run is None:
            tools = ctx.input.get("tools") or []
            names = frozenset(
                str(t["name"]) for t in tools if isinstance(t, Mapping) and t.get("name")
            )
            run = ctx.scratch[_SCRATCH] = AguiRun(frontend_tools=names)
            ctx.scratch["ag-ui.counter"] = itertools.count(1)
        assert isinstance(run, AguiRun)
        return run

    def _request(
        self,
        ctx: RunContext,
        resume: list[dict[str, Any]] | None,
        skip_tool_results: set[Any] | None = None,
    ) -> UpstreamRequest:
        run = self._run(ctx)
        input = ctx.input
        number = next(ctx.scratch["ag-ui.counter"])
        upstream_run_id = ctx.run_id if number == 1 else f"{ctx.run_id}.{number}"
        parent = run.upstream_runs[-1] if run.upstream_runs else None
        forwarded = input.get("forwardedProps")
        if forwarded is None and (self.params or input.get("params")):
            forwarded = {**self.params, **(input.get("params") or {})}
        body = build_run_agent_input(
            thread_id=str(ctx.transcript.get("threadId") or ctx.session_id),
            run_id=upstream_run_id,
            # a tool call answered through ``resume`` gets no tool message as well
            history=[
                entry
                for entry in ctx.history
                if not (
                    entry.get("role") == "tool"
                    and entry.get("toolCallId") in (skip_tool_results or ())
                )
            ],
            tools=input.get("tools") or [],
            state=ctx.transcript.get("state"),
            forwarded_props=forwarded,
            context=input.get("context"),
            parent_run_id=parent if number > 1 else None,
            resume=resume,
        )
        run.response = UpstreamResponse()
        ctx.scratch["ag-ui.normalizer"] = AguiNormalizer()
        limit = self.max_event_bytes or ctx.options.max_upstream_event_bytes
        return UpstreamRequest(self.url, body, self.headers, max_event_bytes=limit)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> UpstreamRequest:
        return self._request(ctx, None)

    async def prepare_continuation(self, ctx: RunContext) -> UpstreamRequest:
        run = self._run(ctx)
        resume: list[dict[str, Any]] = []
        for command in ctx.commands_since_request:
            payload = command["payload"]
            approval_id = payload.get("approvalId")
            if approval_id not in run.interrupts:
                continue
            decision = payload.get("decision", "expired")
            if command["type"] == "approval.expire" or decision == "expired":
                resume.append({"interruptId": approval_id, "status": "cancelled"})
                continue
            answer: dict[str, Any] = {"decision": decision}
            if payload.get("data") is not None:
                answer["data"] = payload["data"]
            resume.append({"interruptId": approval_id, "status": "resolved", "payload": answer})
        answered = {run.interrupts[entry["interruptId"]].get("toolCallId") for entry in resume} - {
            None
        }
        return self._request(ctx, resume or None, skip_tool_results=answered)

    def on_command(self, command: Command, ctx: RunContext) -> None:
        """An answered interrupt about a tool call answers that tool call too."""
        if command.type not in ("approval.resolve", "approval.expire"):
            return
        run = self._run(ctx)
        approval_id = command.payload.get("approvalId")
        interrupt = run.interrupts.get(approval_id) if isinstance(approval_id, str) else None
        tool_call_id = interrupt.get("toolCallId") if interrupt else None
        entity = ctx.entity("tool", tool_call_id) if tool_call_id else None
        if tool_call_id is None or entity is None or entity.executor != "runtime":
            return  # a frontend tool still gets its result from the app
        decision = command.payload.get("decision", "expired")
        if decision in ("approved", "modified"):
            result: dict[str, Any] = {"decision": decision}
            if command.payload.get("data") is not None:
                result["data"] = command.payload["data"]
            ctx.complete_tool(tool_call_id, result)
        else:
            ctx.fail_tool(
                tool_call_id,
                {"code": f"approval_{decision}", "message": f"The call was {decision}."},
            )

    def transform_error(self, error: BaseException, ctx: RunContext) -> list[AgentEvent]:
        if isinstance(error, UpstreamMalformedChunk):  # SSE framing broken (strict transport)
            error = violation("AGUI501", f"malformed SSE framing: {error.message}")
        return super().transform_error(error, ctx)

    # -- chunks -------------------------------------------------------------------------------

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        raw = decode_agui_chunk(chunk)
        if raw is None:
            return
        run = self._run(ctx)
        normalizer: AguiNormalizer = ctx.scratch["ag-ui.normalizer"]
        for wire in normalizer.feed(raw):
            handle_event(run, ctx, parse_agui_event(wire))

    def on_upstream_end(self, ctx: RunContext) -> None:
        run = self._run(ctx)
        normalizer: AguiNormalizer = ctx.scratch["ag-ui.normalizer"]
        for wire in normalizer.close():
            handle_event(run, ctx, parse_agui_event(wire))
        if not run.response.finished:
            raise violation("AGUI003", "the stream ended without RUN_FINISHED or RUN_ERROR")
        if run.result is not None:
            ctx.output = run.result
        ctx.usage = run.usage

    def flush(self, ctx: RunContext) -> list[AgentEvent]:
        if not ctx.ended:
            self.on_upstream_end(ctx)
            run = self._run(ctx)
            if run.cancelled:
                ctx.cancel("cancelled")
            elif not ctx.is_waiting():
                finish_run(ctx, raw_usage=run.raw_usage)
            # while something waits, runtime tools an interrupt refers to stay open
        return ctx.take()
