"""Prometheus metrics of the gateway: one registry per app, bounded labels, small helpers.

- :mod:`.registry`: the metric families (:class:`GatewayMetrics`) and ``/metrics`` rendering.
- :mod:`.labels`: the bounded label vocabularies (:class:`LabelGuard`).
- :mod:`.run_tracker`: the per-run figures derived from the run's events.
- :mod:`.instrumented_backend`: backend operation latency and errors.
"""

from __future__ import annotations

from app.observability.metrics.instrumented_backend import InstrumentedBackend
from app.observability.metrics.labels import (
    ERROR_CODES,
    EVENT_TYPES,
    ISSUE_CODES,
    OTHER,
    OUTCOMES,
    TRANSPORTS,
    LabelGuard,
)
from app.observability.metrics.registry import METRICS_CONTENT_TYPE, GatewayMetrics
from app.observability.metrics.run_tracker import RunTracker

__all__ = [
    "ERROR_CODES",
    "EVENT_TYPES",
    "ISSUE_CODES",
    "METRICS_CONTENT_TYPE",
    "OTHER",
    "OUTCOMES",
    "TRANSPORTS",
    "GatewayMetrics",
    "InstrumentedBackend",
    "LabelGuard",
    "RunTracker",
]
