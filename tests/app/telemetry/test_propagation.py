"""A stored ``traceparent`` reads back as the W3C propagator reads it, valid or not."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.telemetry.propagation import context_of, span_context_of

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


@pytest.mark.parametrize(
    "traceparent",
    [
        f"00-{TRACE}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-00",
        f"00-{TRACE}-{SPAN}-03",
        f"00-{'0' * 32}-{SPAN}-01",  # an all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero span id is invalid
        f"00-{TRACE.upper()}-{SPAN}-01",  # W3C: lower-case hex only
        f"00-+{TRACE[1:]}-{SPAN}-01",  # not hex, though int() would read it
        f"00-{TRACE[:-1]}_-{SPAN}-01",
        f"ff-{TRACE}-{SPAN}-01",
        f"01-{TRACE}-{SPAN}-01-future",  # a later version with more fields
        f"00-{TRACE}-{SPAN}-01-",
        "00-garbage",
    ],
)
def test_a_traceparent_reads_as_the_propagator_reads_it(traceparent: str) -> None:
    expected = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    ).get_span_context()
    context = context_of(traceparent)
    assert context is not None
    assert trace.get_current_span(context).get_span_context() == expected
    assert span_context_of(traceparent) == (expected if expected.is_valid else None)


def test_no_traceparent_is_no_parent() -> None:
    assert context_of(None) is None and context_of("") is None
    assert span_context_of(None) is None
