"""The span of one run, ``invoke_agent {provider}`` (INTERNAL), and what happens under it.

Made by the instance that executes the run, as a child of the request that accepted it (its
``traceparent`` travels with the run, also a queued one adopted elsewhere). Under it:

- one ``chat {model}`` CLIENT span per upstream request (the provider's :class:`RunTracing`
  hook, ``providers/tracing.py``), from opening the request to the end of its stream;
- one ``execute_tool {name}`` span per tool the gateway sees run (``tool.running``, else
  ``tool.requested``, to its terminal event);
- events: approvals asked and answered, commands delivered, an abort (reason, and who asked
  when it was asked here), the wait in the queue.

The run's terminal sets ``agent_gateway.run.status``; ``run.failed`` sets ``error.type`` to
its error code and the span status to ERROR. Prompts, completions, tool arguments and results
are recorded only with ``capture_content``; credentials never (they are request headers, never
read here).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from app.telemetry import attributes as attr
from app.telemetry.propagation import context_of, traceparent_of
from core.runs import RUN_TERMINAL_TYPES
from providers.tracing import CallDescription
from providers.transports.request import UpstreamRequest

if TYPE_CHECKING:
    from app.telemetry.setup import Telemetry

__all__ = ["RunSpan"]

#: The event types :meth:`RunSpan.on_events` looks at; every other event passes by.
WATCHED = frozenset(
    {
        *RUN_TERMINAL_TYPES,
        "tool.requested",
        "tool.running",
        "tool.completed",
        "tool.failed",
        "tool.cancelled",
        "approval.requested",
        "approval.resolved",
    }
)
_TOOL_ENDS = frozenset({"tool.completed", "tool.failed", "tool.cancelled"})


def _ns() -> int:
    return time.time_ns()


class _Tool:
    __slots__ = ("arguments", "name", "started_ns")

    def __init__(self, name: str, started_ns: int) -> None:
        self.name = name
        self.started_ns = started_ns
        self.arguments: str | None = None


class _Call:
    """The model call in flight: its span, and what its metrics need."""

    __slots__ = ("description", "model", "span", "started")

    def __init__(self, span: Span, model: str | None) -> None:
        self.span = span
        self.model = model
        self.started = time.monotonic()
        self.description: CallDescription | None = None


class RunSpan:
    """One run's span and its children; the run's :class:`providers.tracing.RunTracing`.

    Its parent: ``parent_context`` (the accepting request's, when accepted here), else the
    stored ``parent`` traceparent (a run adopted from another instance)."""

    def __init__(
        self,
        telemetry: Telemetry,
        principal: str,
        key: str,
        run_id: str,
        provider: str,
        parent: str | None,
        queued_seconds: float | None = None,
        parent_context: Context | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.tracer = telemetry.tracer
        self.capture = telemetry.capture_content
        self.provider = provider
        self.run_id = run_id
        self.genai_provider = attr.genai_provider_name(telemetry.kinds.get(provider))
        self.propagate = telemetry.propagate.get(provider, True)
        self.span = self.tracer.start_span(
            f"invoke_agent {provider}",
            context=context_of(parent) if parent_context is None else parent_context,
            kind=SpanKind.INTERNAL,
            attributes={
                attr.OPERATION: "invoke_agent",
                attr.PROVIDER_NAME: self.genai_provider,
                attr.PROVIDER: provider,
                attr.RUN_ID: run_id,
                attr.CONVERSATION_ID: attr.conversation_id(principal, key),
            },
        )
        #: This span's ``traceparent``: stored with the conversation (the reaper, aborts).
        self.traceparent = traceparent_of(self.span)
        #: The context with this span current: its children's parent, and the run's own
        #: (``app/runs/execute.py``, :func:`app.telemetry.logs.span_in_logs`).
        self.context = trace.set_span_in_context(self.span)
        self._call: _Call | None = None
        self._tools: dict[str, _Tool] = {}
        self._ended = False
        if queued_seconds is not None:
            self.span.add_event(
                "run.queue_wait", {"agent_gateway.queue.wait_seconds": queued_seconds}
            )

    # -- providers.tracing.RunTracing ---------------------------------------------------------

    def start_call(self, request: Any) -> Mapping[str, str]:
        self.end_call()
        body = getattr(request, "json", None)
        model = body.get("model") if isinstance(body, dict) else None
        model = model if isinstance(model, str) and model else None
        attributes: dict[str, Any] = {
            attr.OPERATION: "chat",
            attr.PROVIDER_NAME: self.genai_provider,
        }
        if model is not None:
            attributes[attr.REQUEST_MODEL] = model
        url = getattr(request, "url", None)
        if isinstance(url, str):
            parts = urlsplit(url)
            if parts.hostname:
                attributes[attr.SERVER_ADDRESS] = parts.hostname
            if parts.port:
                attributes[attr.SERVER_PORT] = parts.port
        if self.capture and isinstance(body, dict):
            messages = body.get("messages", body.get("input"))
            if messages is not None:
                attributes["gen_ai.input.messages"] = orjson.dumps(messages).decode()
        span = self.tracer.start_span(
            f"chat {model}" if model else f"chat {self.provider}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._call = _Call(span, model)
        if not self.propagate or not isinstance(request, UpstreamRequest):
            return {}  # only an UpstreamRequest takes headers (``providers.tracing.start_call``)
        traceparent = traceparent_of(span)
        return {"traceparent": traceparent} if traceparent else {}

    def describe_call(self, description: CallDescription) -> None:
        call = self._call
        if call is None:
            return
        call.description = description
        attributes: dict[str, Any] = {}
        if description.response_id:
            attributes[attr.RESPONSE_ID] = description.response_id
        if description.response_model:
            attributes[attr.RESPONSE_MODEL] = description.response_model
        if description.finish_reasons:
            attributes[attr.RESPONSE_FINISH_REASONS] = list(description.finish_reasons)
        if description.input_tokens is not None:
            attributes[attr.USAGE_INPUT_TOKENS] = description.input_tokens
        if description.output_tokens is not None:
            attributes[attr.USAGE_OUTPUT_TOKENS] = description.output_tokens
        if attributes:  # one call: the span's lock and attribute checks once
            call.span.set_attributes(attributes)

    def end_call(self, error: BaseException | None = None) -> None:
        call, self._call = self._call, None
        if call is None:
            return
        error_type: str | None = None
        if error is not None:
            error_type = _error_type(error)
            call.span.set_attribute(attr.ERROR_TYPE, error_type)
            call.span.set_status(Status(StatusCode.ERROR, error_type))
        call.span.end()
        described = call.description or CallDescription()
        self.telemetry.metrics.record(
            self.genai_provider,
            call.model or described.response_model,
            time.monotonic() - call.started,
            described.input_tokens,
            described.output_tokens,
            error_type,
        )

    # -- the run's events -----------------------------------------------------------------------

    def on_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """The run's events as they are logged: tools, approvals and the terminal."""
        for event in events:
            kind = event["type"]
            if kind not in WATCHED or event.get("runId") != self.run_id:
                continue
            payload: Mapping[str, Any] = event.get("payload") or {}
            if kind == "tool.requested":
                tool = _Tool(str(payload.get("name") or "tool"), _ns())
                if self.capture and isinstance(payload.get("arguments"), str):
                    tool.arguments = payload["arguments"]
                self._tools[str(payload.get("toolCallId"))] = tool
            elif kind == "tool.running":
                running = self._tools.get(str(payload.get("toolCallId")))
                if running is not None:
                    running.started_ns = _ns()
            elif kind in _TOOL_ENDS:
                self._end_tool(kind, payload)
            elif kind == "approval.requested":
                self.span.add_event(
                    "approval.requested",
                    {"agent_gateway.approval.id": str(payload.get("approvalId"))},
                )
            elif kind == "approval.resolved":
                self.span.add_event(
                    "approval.resolved",
                    {
                        "agent_gateway.approval.id": str(payload.get("approvalId")),
                        "agent_gateway.approval.decision": str(payload.get("decision")),
                    },
                )
            else:
                self._terminal(kind, payload)

    def _end_tool(self, kind: str, payload: Mapping[str, Any]) -> None:
        call_id = str(payload.get("toolCallId"))
        tool = self._tools.pop(call_id, None)
        if tool is None:
            return
        attributes: dict[str, Any] = {
            attr.OPERATION: "execute_tool",
            attr.TOOL_NAME: tool.name,
            attr.TOOL_CALL_ID: call_id,
        }
        if tool.arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = tool.arguments
        if self.capture and kind == "tool.completed" and "result" in payload:
            attributes["gen_ai.tool.call.result"] = orjson.dumps(payload["result"]).decode()
        span = self.tracer.start_span(
            f"execute_tool {tool.name}",
            context=self.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=tool.started_ns,
        )
        if kind != "tool.completed":
            code = _error_code(payload) if kind == "tool.failed" else "cancelled"
            span.set_attribute(attr.ERROR_TYPE, code)
            span.set_status(Status(StatusCode.ERROR, code))
        span.end()

    def _terminal(self, kind: str, payload: Mapping[str, Any]) -> None:
        attributes = {attr.RUN_STATUS: kind.removeprefix("run.")}
        if kind == "run.failed":
            code = _error_code(payload)
            attributes[attr.ERROR_TYPE] = code
            self.span.set_status(Status(StatusCode.ERROR, code))
        elif kind == "run.cancelled":
            attributes[attr.ABORT_REASON] = str(payload.get("reason"))
        self.span.set_attributes(attributes)

    # -- commands and aborts --------------------------------------------------------------------

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """An event on the run's span (a command delivered, an abort)."""
        if not self._ended:
            self.span.add_event(name, dict(attributes))

    def end(self) -> None:
        """The run is over: what is still open ends with it."""
        if self._ended:
            return
        self._ended = True
        self.end_call()
        self.span.end()


def _error_code(payload: Mapping[str, Any]) -> str:
    error = payload.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    return code if isinstance(code, str) and code else "error"


def _error_type(error: BaseException) -> str:
    code = getattr(error, "code", None)
    return code if isinstance(code, str) and code else type(error).__qualname__
