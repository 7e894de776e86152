"""The gateway's OpenTelemetry providers, built once per app when ``[telemetry] enabled``.

Where spans and metrics go and how traces are sampled are the SDK's standard environment
variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``; ``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER`` ``none`` keeps them in process). The providers are this app's own, not
the process-global ones: two apps in one process (tests) never share spans.
"""

from __future__ import annotations

import os
from typing import Final

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from app.config import Settings
from app.telemetry.genai_metrics import GenAIMetrics

__all__ = ["DEFAULT_SERVICE_NAME", "HashedResource", "Telemetry", "create_telemetry"]

DEFAULT_SERVICE_NAME: Final = "agent-event-gateway"
_SCOPE: Final = "agent_event_gateway"


class Telemetry:
    """This app's tracer and GenAI metrics; :meth:`shutdown` flushes what is pending."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        metric_readers: list[MetricReader] | None = None,
    ) -> None:
        self.capture_content = settings.telemetry.capture_content
        #: ``[providers.NAME] propagate``: send the run's ``traceparent`` upstream.
        self.propagate = {name: p.propagate for name, p in settings.providers.items()}
        self.kinds = {name: p.kind for name, p in settings.providers.items()}
        attributes = (
            {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
        )
        resource = HashedResource(Resource.create(attributes))
        self.tracer_provider = TracerProvider(resource=resource)  # sampler: OTEL_TRACES_SAMPLER
        if _exporter("OTEL_TRACES_EXPORTER"):
            self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers = list(metric_readers or [])
        if _exporter("OTEL_METRICS_EXPORTER"):
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self.tracer: Tracer = self.tracer_provider.get_tracer(_SCOPE)
        self.metrics = GenAIMetrics(self.meter_provider.get_meter(_SCOPE), registry)

    def shutdown(self) -> None:
        """Export what is pending and stop the exporters."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


class HashedResource(Resource):
    """A :class:`Resource` whose hash is computed once: the OTLP encoder groups every exported
    span by its resource, and ``Resource.__hash__`` serialises the attributes to JSON each time
    (BENCHMARKS.md, "OpenTelemetry (issue 53)"). Resources are immutable: the hash never changes.
    """

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self.hashed = super().__hash__()

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other)


def _exporter(variable: str) -> bool:
    """The OTLP exporter is on unless ``variable`` says ``none``."""
    return os.environ.get(variable, "otlp").strip().lower() != "none"


def create_telemetry(settings: Settings, registry: CollectorRegistry) -> Telemetry | None:
    """The app's telemetry; None when ``[telemetry] enabled`` is false."""
    if not settings.telemetry.enabled:
        return None
    return Telemetry(settings, registry)
