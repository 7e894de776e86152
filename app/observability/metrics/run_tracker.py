"""Per-run figures derived from the run's own events, and one log line per run start and end.

The figures: time to first event, duration, outcome, upstream error code, abort latency.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.runs import RUN_TERMINAL_TYPES

if TYPE_CHECKING:
    from app.observability.metrics.registry import GatewayMetrics

__all__ = ["COUNT_EVERY_EVENTS", "COUNT_EVERY_SECONDS", "RunTracker"]

_run_log = logging.getLogger("agent_gateway.runs")
#: ``on_events`` adds to the events counter once this many events wait, or this long after
#: it last did (and always at the run's end).
COUNT_EVERY_EVENTS = 256
COUNT_EVERY_SECONDS = 1.0


class RunTracker:
    """Per-run figures, derived from the run's events as the run loop emits them.

    ``on_event`` once per accepted event (or ``on_events`` once per batch of them);
    ``abort_requested`` when an abort reaches the run. The terminal event ends the run
    (counted once even if fed twice); ``close`` ends a run that stopped without a terminal
    (e.g. the task was torn down) as ``failed``.

    ``on_events`` adds to the events counter at most ``COUNT_EVERY_EVENTS`` events or
    ``COUNT_EVERY_SECONDS`` late, and at the run's end: one prometheus ``inc`` costs as much
    as the rest of a one-event read's bookkeeping (BENCHMARKS.md, "Costs behind the code's
    shortcuts").
    """

    __slots__ = (
        "_abort_at",
        "_counted_at",
        "_ended",
        "_error_code",
        "_error_message",
        "_first_seen",
        "_m",
        "_pending",
        "_pending_count",
        "_provider",
        "_started_at",
        "_user_messages",
    )

    def __init__(self, metrics: GatewayMetrics, provider: str) -> None:
        self._m = metrics
        self._provider = provider
        self._started_at = metrics.clock()
        self._first_seen = False
        self._user_messages: set[object] = set()
        self._abort_at: float | None = None
        self._ended = False
        self._error_code: str | None = None
        self._error_message: str | None = None
        #: Events by type not yet added to the events counter (``on_events``).
        self._pending: dict[object, int] = {}
        self._pending_count = 0
        self._counted_at = self._started_at
        metrics.runs_started.labels(provider).inc()
        metrics.active_runs.labels(provider).inc()
        _run_log.info("run started")

    @property
    def ended(self) -> bool:
        return self._ended

    def on_events(self, events: Sequence[Mapping[str, Any]]) -> None:
        """``on_event`` for each of ``events`` (in order); the events counter moves once per
        type per flush (see the class docstring)."""
        pending = self._pending
        terminal = False
        for event in events:
            event_type = event.get("type")
            pending[event_type] = pending.get(event_type, 0) + 1
            if event_type in RUN_TERMINAL_TYPES:
                terminal = True
        self._pending_count += len(events)
        if self._ended:
            self.count_events()
            return
        if terminal or not self._first_seen:
            for event in events:
                self._follow(event)  # ends the run (and counts) at its terminal
                if self._ended:
                    self.count_events()  # what came after the terminal in this batch
                    return
        if self._pending_count >= COUNT_EVERY_EVENTS or (
            self._m.clock() - self._counted_at >= COUNT_EVERY_SECONDS
        ):
            self.count_events()

    def count_events(self) -> None:
        """Add the events seen so far to the events counter."""
        observe = self._m.observe_event
        for event_type, count in self._pending.items():
            observe(event_type, count)
        self._pending.clear()
        self._pending_count = 0
        self._counted_at = self._m.clock()

    def on_event(self, event: Mapping[str, Any]) -> None:
        self._m.observe_event(event.get("type"))
        if not self._ended:
            self._follow(event)

    def _follow(self, event: Mapping[str, Any]) -> None:
        """The first event after the framing (time to first event) and the terminal."""
        event_type = event.get("type")
        if not self._first_seen and not self._is_framing(event):
            self._first_seen = True
            self._m.time_to_first_event.labels(self._provider).observe(
                self._m.clock() - self._started_at
            )
        if event_type in RUN_TERMINAL_TYPES:
            outcome = str(event_type)[4:]
            if outcome == "failed":
                payload = event.get("payload")
                error = payload.get("error") if isinstance(payload, Mapping) else None
                code = error.get("code") if isinstance(error, Mapping) else None
                self._error_code = self._m.error_label(code)
                message = error.get("message") if isinstance(error, Mapping) else None
                self._error_message = message if isinstance(message, str) else None
                self._m.upstream_errors.labels(self._provider, self._error_code).inc()
            self._end(outcome)

    def _is_framing(self, event: Mapping[str, Any]) -> bool:
        """What the gateway emits before the upstream answers: session/run start, user turn."""
        event_type = event.get("type")
        if event_type in ("session.started", "run.started"):
            return True
        payload = event.get("payload")
        if not isinstance(event_type, str) or not event_type.startswith("message."):
            return False
        if not isinstance(payload, Mapping):
            return False
        message_id = payload.get("messageId")
        if event_type == "message.started" and payload.get("role") == "user":
            self._user_messages.add(message_id)
        return message_id in self._user_messages

    def abort_requested(self) -> None:
        if self._abort_at is None and not self._ended:
            self._abort_at = self._m.clock()

    def close(self, outcome: str = "failed") -> None:
        """End a run whose terminal never reached ``on_event`` (counted once)."""
        if not self._ended:
            self._end(outcome)

    async def finish(
        self,
        run_id: str,
        issues: Callable[[], Awaitable[Iterable[Mapping[str, Any]]]],
        *,
        cancelled: bool = False,
    ) -> None:
        """After the run: close it if needed and count the reducer issues its events raised.

        ``issues`` returns the run's protocol issues (``Backend.run_issues``); an error
        reading them never breaks the run's end.
        """
        self.close("cancelled" if cancelled else "failed")
        try:
            found = await issues()
        except Exception:
            return
        self._m.protocol_issues_from(
            issue for issue in found if isinstance(issue, Mapping) and issue.get("runId") == run_id
        )

    def _end(self, outcome: str) -> None:
        self._ended = True
        self.count_events()
        now = self._m.clock()
        m = self._m
        m.runs_ended.labels(self._provider, m.outcome_label(outcome)).inc()
        m.active_runs.labels(self._provider).dec()
        m.run_duration.labels(self._provider, m.outcome_label(outcome)).observe(
            now - self._started_at
        )
        if self._abort_at is not None and outcome == "cancelled":
            m.abort_latency.labels(self._provider).observe(now - self._abort_at)
        extra: dict[str, Any] = {
            "outcome": outcome,
            "duration_ms": round((now - self._started_at) * 1000, 1),
        }
        if self._error_code is not None:
            extra["error_code"] = self._error_code
            # Scrubbed of secrets by the log formatter (app/observability/logs), like every field.
            extra["error_message"] = (self._error_message or "")[:500]
        _run_log.info("run %s", outcome, extra=extra)
