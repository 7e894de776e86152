"""Prometheus metrics of the gateway: one registry per app, bounded labels, small helpers.

Every label value goes through a :class:`LabelGuard`: a closed vocabulary where the spec has
one (event types, outcomes, error and issue codes, transports), otherwise the first
``max_values`` distinct values seen (provider names come from the config, backend operations
from the code) and ``"other"`` beyond. The conversation key is never a label.

The app calls the helpers at a few places (run start/event/end, subscriber attach/detach,
backend operations); :meth:`GatewayMetrics.run_tracker` derives the per-run figures (time to
first event, duration, outcome, upstream error code, abort latency) from the run's own events,
so the run loop needs one call per event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from core.events import EVENT_TYPES

__all__ = [
    "ERROR_CODES",
    "EVENT_TYPES",
    "ISSUE_CODES",
    "METRICS_CONTENT_TYPE",
    "OTHER",
    "OUTCOMES",
    "TRANSPORTS",
    "GatewayMetrics",
    "LabelGuard",
    "RunTracker",
]

OTHER: Final = "other"
METRICS_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

OUTCOMES: Final = frozenset({"completed", "failed", "cancelled"})
TRANSPORTS: Final = frozenset({"sse", "ws"})
ISSUE_CODES: Final = frozenset(
    {
        "duplicate_entity",
        "invalid_sequence",
        "invalid_transition",
        "missing_entity",
        "missing_run",
    }
)
#: AgentError codes of http-api.md "Errors" that a run can fail with.
ERROR_CODES: Final = frozenset(
    {
        "upstream_http_error",
        "upstream_connect_error",
        "upstream_idle_timeout",
        "upstream_timeout",
        "upstream_dropped",
        "upstream_malformed_chunk",
        "upstream_protocol_error",
        "upstream_error",
        "upstream_event_too_large",
        "truncated_arguments",
        "tool_incomplete",
        "task_incomplete",
        "tool_result_timeout",
        "wait_timeout",
        "gateway_instance_lost",
        "provider_error",
    }
)

_run_log = logging.getLogger("agent_gateway.runs")

_LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_RUN_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_BACKEND_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _AbortSource(Protocol):
    def add_callback(self, callback: Callable[[Any], None]) -> Callable[[], None]: ...


class LabelGuard:
    """Maps raw values to a bounded label vocabulary.

    With ``allowed``, anything outside it is ``"other"``. Without, the first ``max_values``
    distinct values are kept as they are and later new ones become ``"other"``.
    """

    __slots__ = ("_allowed", "_max_values", "_seen")

    def __init__(self, allowed: Iterable[str] | None = None, *, max_values: int = 32) -> None:
        self._allowed = frozenset(allowed) if allowed is not None else None
        self._max_values = max_values
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        if not isinstance(value, str) or not value:
            return OTHER
        if self._allowed is not None:
            return value if value in self._allowed else OTHER
        if value in self._seen:
            return value
        if len(self._seen) >= self._max_values or len(value) > 64:
            return OTHER
        self._seen.add(value)
        return value

    def seed(self, values: Iterable[str]) -> None:
        """Pre-register known values (e.g. the configured provider names)."""
        for value in values:
            self(value)


class GatewayMetrics:
    """The gateway's metric families on their own registry (one per app instance)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        providers: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.provider_label = LabelGuard(max_values=32)
        self.provider_label.seed(providers)
        self.event_label = LabelGuard(EVENT_TYPES)
        self.outcome_label = LabelGuard(OUTCOMES)
        self.transport_label = LabelGuard(TRANSPORTS)
        self.error_label = LabelGuard(ERROR_CODES)
        self.issue_label = LabelGuard(ISSUE_CODES)
        self.backend_label = LabelGuard({"memory", "redis"})
        self.op_label = LabelGuard(max_values=48)
        r = self.registry
        self.runs_started = Counter(
            "agent_gateway_runs_started", "Runs started.", ["provider"], registry=r
        )
        self.runs_ended = Counter(
            "agent_gateway_runs_ended", "Runs ended.", ["provider", "outcome"], registry=r
        )
        self.events = Counter(
            "agent_gateway_events", "AgentEvents accepted from providers.", ["type"], registry=r
        )
        self._event_children: dict[object, Any] = {}
        self.active_runs = Gauge(
            "agent_gateway_active_runs", "Runs currently running.", ["provider"], registry=r
        )
        self.subscribers = Gauge(
            "agent_gateway_subscribers", "Connected stream subscribers.", ["transport"], registry=r
        )
        self.time_to_first_event = Histogram(
            "agent_gateway_time_to_first_event_seconds",
            "From run start to the provider's first event after run.started.",
            ["provider"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "agent_gateway_run_duration_seconds",
            "From run start to its terminal event.",
            ["provider", "outcome"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.abort_latency = Histogram(
            "agent_gateway_abort_latency_seconds",
            "From abort requested to the run closed (upstream closed, run.cancelled emitted).",
            ["provider"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "agent_gateway_upstream_errors",
            "Runs failed, by AgentError code.",
            ["provider", "code"],
            registry=r,
        )
        self.protocol_issues = Counter(
            "agent_gateway_protocol_issues",
            "Reducer protocol issues, by issue code.",
            ["code"],
            registry=r,
        )
        self.backend_op_latency = Histogram(
            "agent_gateway_backend_op_seconds",
            "Backend operation latency.",
            ["backend", "op"],
            buckets=_BACKEND_BUCKETS,
            registry=r,
        )
        self.backend_op_errors = Counter(
            "agent_gateway_backend_op_errors",
            "Backend operations that raised.",
            ["backend", "op"],
            registry=r,
        )
        self.dropped_subscribers = Counter(
            "agent_gateway_dropped_subscribers",
            "Subscribers disconnected for being too slow.",
            ["transport"],
            registry=r,
        )

    # -- runs ---------------------------------------------------------------------------------

    def run_tracker(self, provider: str, abort_signal: _AbortSource | None = None) -> RunTracker:
        """Count a run as started and return the tracker to feed its events to.

        With ``abort_signal`` (anything with ``add_callback``, e.g. the run's AbortSignal), the
        abort time is taken when the signal fires, for the abort latency histogram.
        """
        tracker = RunTracker(self, self.provider_label(provider))
        if abort_signal is not None:
            abort_signal.add_callback(lambda _reason: tracker.abort_requested())
        return tracker

    def observe_event(self, event_type: object) -> None:
        # Once per event (hot path): the labelled child is resolved once per event type.
        child = self._event_children.get(event_type)
        if child is None:
            child = self.events.labels(self.event_label(event_type))
            if isinstance(event_type, str) and len(self._event_children) < 64:
                self._event_children[event_type] = child
        child.inc()

    def protocol_issue(self, code: object) -> None:
        self.protocol_issues.labels(self.issue_label(code)).inc()

    def protocol_issues_from(self, issues: Iterable[Mapping[str, Any]]) -> None:
        for issue in issues:
            self.protocol_issue(issue.get("code"))

    # -- subscribers --------------------------------------------------------------------------

    @contextmanager
    def track_subscriber(self, transport: str) -> Iterator[None]:
        """Count a subscriber as connected for the duration of the ``with`` block."""
        gauge = self.subscribers.labels(self.transport_label(transport))
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def subscriber_dropped(self, transport: str) -> None:
        self.dropped_subscribers.labels(self.transport_label(transport)).inc()

    # -- backend ------------------------------------------------------------------------------

    @contextmanager
    def backend_op(self, backend: str, op: str) -> Iterator[None]:
        """Time one backend operation; an exception counts as an error and propagates."""
        labels = (self.backend_label(backend), self.op_label(op))
        start = self.clock()
        try:
            yield
        except Exception:  # a cancellation is not a backend error
            self.backend_op_errors.labels(*labels).inc()
            raise
        finally:
            self.backend_op_latency.labels(*labels).observe(self.clock() - start)

    # -- exposition ---------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry (serve with METRICS_CONTENT_TYPE)."""
        return generate_latest(self.registry)


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

    def on_event(self, event: Mapping[str, Any]) -> None:
        event_type = event.get("type")
        self._m.observe_event(event_type)
        if self._ended:
            return
        if not self._first_seen and not self._is_framing(event):
            self._first_seen = True
            self._m.time_to_first_event.labels(self._provider).observe(
                self._m.clock() - self._started_at
            )
        if event_type in ("run.completed", "run.failed", "run.cancelled"):
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
        snapshot: Callable[[], Awaitable[Any]],
        *,
        cancelled: bool = False,
    ) -> None:
        """After the run: close it if needed and count the reducer issues its events raised.

        ``snapshot`` returns the conversation's snapshot (an object with ``.state``) or None.
        """
        self.close("cancelled" if cancelled else "failed")
        try:
            snap = await snapshot()
        except Exception:
            return
        state = getattr(snap, "state", None)
        if isinstance(state, Mapping):
            self._m.protocol_issues_from(
                issue
                for issue in state.get("issues", ())
                if isinstance(issue, Mapping) and issue.get("runId") == run_id
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
            # Scrubbed of secrets by the log formatter (app/logs.py), like every field.
            extra["error_message"] = (self._error_message or "")[:500]
        _run_log.info("run %s", outcome, extra=extra)
