"""Trace contexts as W3C ``traceparent`` strings: what is stored with a run (its request's
context, queued or not; its own span's, in the conversation meta) and read back by the
instance that executes, aborts or reaps it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "context_of",
    "context_of_headers",
    "current_context",
    "current_traceparent",
    "link_to",
    "span_context_of",
    "traceparent_of",
]

_PROPAGATOR = TraceContextTextMapPropagator()
_HEX = frozenset("0123456789abcdef")


def traceparent_of(span: Span) -> str | None:
    """``span``'s context as a ``traceparent`` (None when it is not valid), formatted as the
    W3C propagator formats it without building a context and a carrier for it."""
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def current_context() -> Context:
    """The current context (the request being served): the parent of a run accepted here."""
    return otel_context.get_current()


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` (the request being served), if any."""
    return traceparent_of(trace.get_current_span())


def _stored(traceparent: str) -> SpanContext | None:
    """A ``traceparent`` as :func:`traceparent_of` formats it (version 00, lower-case hex) read
    by slicing, without the propagator's carrier, pattern and context; None for any other."""
    if len(traceparent) != 55 or not traceparent.startswith("00-"):
        return None
    if traceparent[35] != "-" or traceparent[52] != "-":
        return None
    digits = traceparent[3:35] + traceparent[36:52] + traceparent[53:]
    if not _HEX.issuperset(digits):
        return None
    trace_id, span_id = int(traceparent[3:35], 16), int(traceparent[36:52], 16)
    if not trace_id or not span_id:
        return None
    flags = TraceFlags(int(traceparent[53:], 16))
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)


def context_of(traceparent: str | None) -> Context | None:
    """A parent context from a stored ``traceparent`` (None: start a new trace)."""
    if not traceparent:
        return None
    stored = _stored(traceparent)
    if stored is not None:
        return trace.set_span_in_context(NonRecordingSpan(stored))
    return _PROPAGATOR.extract({"traceparent": traceparent})


def context_of_headers(headers: Iterable[tuple[bytes, bytes]]) -> Context | None:
    """The parent context an incoming request's ``traceparent``/``tracestate`` carry."""
    carrier: dict[str, str] = {}
    for name, value in headers:
        if name in (b"traceparent", b"tracestate"):
            carrier[name.decode("latin-1")] = value.decode("latin-1")
    if "traceparent" not in carrier:
        return None
    return _PROPAGATOR.extract(carrier)


def span_context_of(traceparent: str | None) -> SpanContext | None:
    if traceparent:
        stored = _stored(traceparent)
        if stored is not None:
            return stored
    context = context_of(traceparent)
    if context is None:
        return None
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def link_to(traceparent: str | None, attributes: Mapping[str, str] | None = None) -> list[Link]:
    """A link to the span ``traceparent`` names (none when it names none)."""
    span_context = span_context_of(traceparent)
    if span_context is None:
        return []
    return [Link(span_context, dict(attributes or {}))]
