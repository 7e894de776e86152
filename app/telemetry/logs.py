"""``trace_id`` and ``span_id`` on the log lines written under a span (JSON and text lines).

The ids are log context fields (``app/observability/logs/context.py``): bound where a span
becomes current (a request, a run), so a line logged in a task started there carries them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from app.observability.logs import log_context

__all__ = ["span_in_logs"]


@contextmanager
def span_in_logs(span: Span, context: Context | None = None) -> Iterator[None]:
    """``span`` is the current span, and its ids are on every line logged meanwhile
    (``context``: one with ``span`` current already, else one is made)."""
    token = otel_context.attach(trace.set_span_in_context(span) if context is None else context)
    span_context = span.get_span_context()
    try:
        if not span_context.is_valid:  # not sampled: no ids to show
            yield
            return
        with log_context(
            trace_id=format(span_context.trace_id, "032x"),
            span_id=format(span_context.span_id, "016x"),
        ):
            yield
    finally:
        otel_context.detach(token)
