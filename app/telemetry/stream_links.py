"""An SSE or WebSocket stream's span links to the span of every run whose end it delivered.

The stream's span is its request's SERVER span (current while it follows the log); a run's span
is found by its ``traceparent`` in the conversation meta (``ConversationMeta.last_run_trace``),
read once per run end the stream delivers, only with ``[telemetry]`` on. The run a
``POST …/runs?stream=true`` accepted is not linked (nor read): its span is a child of the
stream's span already.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

from app.backends import Backend, ConversationRef
from app.telemetry import attributes as attr
from app.telemetry.propagation import span_context_of

__all__ = ["StreamLinks"]

logger = logging.getLogger("app.telemetry")


class StreamLinks:
    """Links the current span (the stream's) to the runs it delivered."""

    def __init__(self, backend: Backend, ref: ConversationRef, child: str | None = None) -> None:
        self.span = trace.get_current_span()
        self.backend = backend
        self.ref = ref
        #: Runs linked, and ``child``: the run the stream's own request accepted (no link).
        self.linked: set[str] = set() if child is None else {child}

    async def delivered(self, run_id: str | None) -> None:
        """The stream delivered ``run_id``'s terminal event."""
        if run_id is None or run_id in self.linked or not self.span.is_recording():
            return
        self.linked.add(run_id)
        try:
            meta = await self.backend.get_meta(self.ref)
        except Exception:  # a link is a nicety: the stream goes on without it
            logger.warning("the span of run %s could not be linked", run_id)
            return
        if meta is None or meta.last_run_id != run_id:
            return
        target = span_context_of(meta.last_run_trace)
        if target is not None:
            self.span.add_link(target, {attr.RUN_ID: run_id})
