"""The telemetry tests' receiver: a loopback OTLP/HTTP endpoint the gateway exports to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.app.telemetry.otlp_receiver import OtlpReceiver, otlp_receiver


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """The receiver, and the standard ``OTEL_*`` variables pointing the exporters at it (short
    export delays; the gateway's shutdown exports what is left)."""
    with otlp_receiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-under-test")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
        monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
        yield running
