"""The GenAI client metrics: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.

Histograms by provider and model, recorded once per model call (its ``chat`` span's end), both
on the OpenTelemetry meter (exported over OTLP) and on the app's Prometheus registry
(``/metrics``: ``gen_ai_client_token_usage`` and ``gen_ai_client_operation_duration_seconds``).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from opentelemetry.metrics import Meter
from prometheus_client import CollectorRegistry, Histogram

from app.observability.metrics.labels import LabelGuard

__all__ = ["GenAIMetrics"]

#: Cached series past which the cache starts over (model names come from requests).
_MAX_SERIES: Final = 1024

#: The semantic conventions' advised buckets.
_TOKEN_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
_DURATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


class GenAIMetrics:
    """Records one model call's duration and token counts."""

    def __init__(self, meter: Meter, registry: CollectorRegistry) -> None:
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=[float(b) for b in _TOKEN_BUCKETS],
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        labels = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
        self.prom_tokens = Histogram(
            "gen_ai_client_token_usage",
            "Number of input and output tokens used (per model call).",
            [*labels, "gen_ai_token_type"],
            buckets=_TOKEN_BUCKETS,
            registry=registry,
        )
        self.prom_duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (one model call, its whole stream).",
            [*labels, "error_type"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        #: Models come from requests and answers: bounded label values.
        self.model_label = LabelGuard(max_values=64)
        self.error_label = LabelGuard(max_values=32)
        #: ``(provider, model, error type)`` -> its series (models and error types are few).
        self._series: dict[tuple[str, str | None, str | None], _Series] = {}

    def record(
        self,
        provider: str,
        model: str | None,
        seconds: float,
        input_tokens: int | None,
        output_tokens: int | None,
        error_type: str | None,
    ) -> None:
        series = self._series.get((provider, model, error_type))
        if series is None:
            series = self._new_series(provider, model, error_type)
        self.duration.record(seconds, series.attributes)
        series.prom_duration.observe(seconds)
        if input_tokens is not None:
            self.tokens.record(input_tokens, series.input_attributes)
            series.prom_input.observe(input_tokens)
        if output_tokens is not None:
            self.tokens.record(output_tokens, series.output_attributes)
            series.prom_output.observe(output_tokens)

    def _new_series(self, provider: str, model: str | None, error_type: str | None) -> _Series:
        model_value = self.model_label(model or "unknown")
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model_value,
        }
        if error_type is not None:
            attributes["error.type"] = error_type
        error_value = self.error_label(error_type) if error_type else ""
        series = _Series(
            attributes,
            {**attributes, "gen_ai.token.type": "input"},
            {**attributes, "gen_ai.token.type": "output"},
            self.prom_duration.labels("chat", provider, model_value, error_value),
            self.prom_tokens.labels("chat", provider, model_value, "input"),
            self.prom_tokens.labels("chat", provider, model_value, "output"),
        )
        if len(self._series) >= _MAX_SERIES:
            self._series.clear()
        self._series[provider, model, error_type] = series
        return series


@dataclasses.dataclass(frozen=True, slots=True)
class _Series:
    """One provider, model and error type: its attribute sets and Prometheus children, built
    once and reused by every later call of the same series."""

    attributes: dict[str, str]
    input_attributes: dict[str, str]
    output_attributes: dict[str, str]
    prom_duration: Histogram
    prom_input: Histogram
    prom_output: Histogram
