"""OpenTelemetry traces and GenAI metrics of the gateway (``[telemetry]``, http-api.md).

- :mod:`.setup`: :class:`Telemetry` (tracer and meter providers, OTLP/HTTP exporters configured
  by the standard ``OTEL_*`` variables); ``None`` when ``[telemetry] enabled`` is false, and
  then no span code runs at all.
- :mod:`.http_spans`: the SERVER span of each request, made inside the gateway's ASGI app.
- :mod:`.run_span`: the ``invoke_agent {provider}`` span of a run and its children.
- :mod:`.propagation`: trace contexts as ``traceparent`` strings, stored with runs.
- :mod:`.genai_metrics`: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.
- :mod:`.attributes`: attribute names and the hashed conversation id.
"""

from __future__ import annotations

from app.telemetry.setup import Telemetry, create_telemetry

__all__ = ["Telemetry", "create_telemetry"]
