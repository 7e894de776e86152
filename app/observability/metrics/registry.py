"""The gateway's Prometheus metric families, on one registry per app, and small helpers.

The app calls the helpers at a few places (run start/event/end, subscriber attach/detach,
backend operations); :meth:`GatewayMetrics.run_tracker` derives the per-run figures from the
run's own events (:mod:`.run_tracker`), so the run loop needs one call per event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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

from app.observability.metrics.labels import (
    ERROR_CODES,
    EVENT_TYPES,
    ISSUE_CODES,
    OUTCOMES,
    TRANSPORTS,
    LabelGuard,
)
from app.observability.metrics.run_tracker import RunTracker

__all__ = ["METRICS_CONTENT_TYPE", "GatewayMetrics"]

METRICS_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_RUN_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_BACKEND_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _AbortSource(Protocol):
    def add_callback(self, callback: Callable[[Any], None]) -> Callable[[], None]: ...


class _StartSlots(Protocol):
    @property
    def held(self) -> int: ...
    @property
    def waiting(self) -> int: ...


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
        self.run_starts = Gauge(
            "agent_gateway_run_starts",
            "Run starts in progress (accepted, run.started not yet logged) and waiting their "
            "turn (gateway.max_concurrent_starts).",
            ["state"],
            registry=r,
        )
        self.dropped_subscribers = Counter(
            "agent_gateway_dropped_subscribers",
            "Subscribers disconnected for being too slow.",
            ["transport"],
            registry=r,
        )

    # -- runs ---------------------------------------------------------------------------------

    def watch_start_slots(self, slots: Callable[[], _StartSlots]) -> None:
        """Read the start slots at each scrape (``slots()``: whichever the run manager holds
        then), so a start costs no metric call."""
        self.run_starts.labels("in_progress").set_function(lambda: slots().held)
        self.run_starts.labels("waiting").set_function(lambda: slots().waiting)

    def run_tracker(self, provider: str, abort_signal: _AbortSource | None = None) -> RunTracker:
        """Count a run as started and return the tracker to feed its events to.

        With ``abort_signal`` (anything with ``add_callback``, e.g. the run's AbortSignal), the
        abort time is taken when the signal fires, for the abort latency histogram.
        """
        tracker = RunTracker(self, self.provider_label(provider))
        if abort_signal is not None:
            abort_signal.add_callback(lambda _reason: tracker.abort_requested())
        return tracker

    def observe_event(self, event_type: object, count: int = 1) -> None:
        """Count ``count`` events of ``event_type`` (once per type per batch on the hot path:
        the labelled child is resolved once per event type)."""
        child = self._event_children.get(event_type)
        if child is None:
            child = self.events.labels(self.event_label(event_type))
            if isinstance(event_type, str) and len(self._event_children) < 64:
                self._event_children[event_type] = child
        child.inc(count)

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
