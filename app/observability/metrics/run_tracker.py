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

__all__ = ["RunTracker"]

_run_log = logging.getLogger("agent_gateway.runs")


class RunTracker:
    """Per-run figures, derived from the run's events as the run loop emits them.

    ``on_event`` once per accepted event; ``abort_requested`` when an abort reaches the run.
    The terminal event ends the run (counted once even if fed twice); ``close`` ends a run that
    stopped without a terminal (e.g. the task was torn down) as ``failed``.
    """

    __slots__ = (
        "_abort_at",
        "_ended",
        "_error_code",
        "_error_message",
        "_first_seen",
        "_m",
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
        metrics.runs_started.labels(provider).inc()
        metrics.active_runs.labels(provider).inc()
        _run_log.info("run started")

    @property
    def ended(self) -> bool:
        return self._ended

    def on_events(self, events: Sequence[Mapping[str, Any]]) -> None:
        """``on_event`` for each of ``events`` (in order), the event counters moved once per
        type instead of once per event."""
        # A plain dict: ``collections.Counter`` costs ~2 µs per call, as much as a whole
        # one-event read (one upstream event per read is common).
        counts: dict[object, int] = {}
        for event in events:
            event_type = event.get("type")
            counts[event_type] = counts.get(event_type, 0) + 1
        observe = self._m.observe_event
        for event_type, count in counts.items():
            observe(event_type, count)
        if self._ended:
            return
        if self._first_seen and counts.keys().isdisjoint(RUN_TERMINAL_TYPES):
            return  # nothing this run's figures follow: the common case, a read of deltas
        for event in events:
            self._follow(event)
            if self._ended:
                return

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
