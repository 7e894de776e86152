"""Spans of what is done to a run from elsewhere: an abort (``abort_run``), a command
(``run_command``), the reaper ending a run whose owner was lost (``end_lost_run``).

An abort or a command may be received by any instance: its span is a child of that request's
span and *links* to the run's span (its ``traceparent``: the run's handle here, else the
conversation meta, ``ConversationMeta.last_run_trace``). The reaper's span is a *child* of the
lost run's span: the run's trace ends with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from app.backends import Backend, ConversationRef
from app.telemetry import attributes as attr
from app.telemetry.propagation import context_of, current_context, current_traceparent, link_to
from app.telemetry.setup import Telemetry

__all__ = [
    "abort_span",
    "command_span",
    "current_context",
    "current_traceparent",
    "lost_run_span",
    "lost_run_traced",
    "run_trace",
]


async def run_trace(backend: Backend, ref: ConversationRef, known: str | None) -> str | None:
    """``known``, else the ``traceparent`` of the conversation's last run (meta)."""
    if known is not None:
        return known
    try:
        meta = await backend.get_meta(ref)
    except Exception:  # the trace is a nicety: the abort itself must not fail for it
        return None
    return None if meta is None else meta.last_run_trace


@asynccontextmanager
async def abort_span(
    telemetry: Telemetry, backend: Backend, ref: ConversationRef, known: str | None
) -> AsyncIterator[None]:
    """The ``abort_run`` span around an abort, linked to the run's span."""
    with _linked(telemetry, "abort_run", await run_trace(backend, ref, known), ref):
        yield


@asynccontextmanager
async def command_span(
    telemetry: Telemetry, backend: Backend, ref: ConversationRef, command: str, known: str | None
) -> AsyncIterator[None]:
    """The ``run_command {type}`` span around a command, linked to the run's span."""
    with _linked(telemetry, f"run_command {command}", await run_trace(backend, ref, known), ref):
        yield


def _linked(
    telemetry: Telemetry, name: str, target: str | None, ref: ConversationRef
) -> AbstractContextManager[Span]:
    return telemetry.tracer.start_as_current_span(
        name,
        kind=SpanKind.INTERNAL,
        links=link_to(target),
        attributes={
            attr.CONVERSATION_ID: attr.conversation_id(ref.principal, ref.key),
            attr.REQUESTED_BY: ref.principal,
        },
    )


def lost_run_span(telemetry: Telemetry, run_span: str | None, run_id: str) -> None:
    """The reaper ended ``run_id`` (its owner was lost): a span in the run's trace."""
    span = telemetry.tracer.start_span(
        "end_lost_run",
        context=context_of(run_span),
        kind=SpanKind.INTERNAL,
        attributes={
            attr.RUN_ID: run_id,
            attr.RUN_STATUS: "failed",
            attr.ERROR_TYPE: "gateway_instance_lost",
        },
    )
    span.set_status(Status(StatusCode.ERROR, "gateway_instance_lost"))
    span.end()


async def lost_run_traced(
    telemetry: Telemetry, backend: Backend, ref: ConversationRef, run_id: str
) -> None:
    """:func:`lost_run_span` for ``run_id``, in the trace its meta names (if it is that run's)."""
    meta = await backend.get_meta(ref)
    trace = None
    if meta is not None and meta.last_run_id == run_id:
        trace = meta.last_run_trace
    lost_run_span(telemetry, trace, run_id)
