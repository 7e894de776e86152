"""An OTLP/HTTP receiver on loopback for the telemetry tests: what the gateway's exporters send.

A real HTTP server (a thread of its own, so a gateway in another process can export to it too)
accepting ``POST /v1/traces`` and ``POST /v1/metrics`` with protobuf bodies, decoded with
``opentelemetry-proto`` (``ExportTraceServiceRequest``, ``ExportMetricsServiceRequest``) into
plain :class:`Span` records and metric names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "Span", "otlp_receiver"]

#: ``Span.kind`` names (``opentelemetry.proto.trace.v1.Span.SpanKind``).
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which is None:
        return None
    return getattr(value, which)


def _attributes(items: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(items)
    return {item.key: _value(item.value) for item in pairs}


def _link(link: Any) -> tuple[str, str, dict[str, Any]]:
    return (link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))


@dataclass(frozen=True)
class Span:
    """One exported span, ids in hex."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str, dict[str, Any]]]
    status: str
    status_message: str
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass
class OtlpReceiver:
    port: int = 0
    spans: list[Span] = field(default_factory=list)
    metric_names: set[str] = field(default_factory=set)
    #: Every attribute and event text exported, for the secret scan.
    requests: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found: list[Span] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            name=span.name,
                            kind=KINDS[span.kind],
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            events=[(e.name, _attributes(e.attributes)) for e in span.events],
                            links=[
                                (
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    _attributes(link.attributes),
                                )
                                for link in span.links
                            ],
                            status=STATUS[span.status.code],
                            status_message=span.status.message,
                            resource=resource,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self.changed:
            self.spans.extend(found)
            self.requests += 1
            self.changed.notify_all()

    def add_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        names = {
            metric.name
            for resource_metrics in request.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }
        with self.changed:
            self.metric_names |= names
            self.requests += 1
            self.changed.notify_all()

    def wait_for(self, check: Callable[[list[Span]], bool], within: float = 15.0) -> list[Span]:
        """Block until ``check(spans)`` holds (a condition, notified on every export)."""
        with self.changed:
            if not self.changed.wait_for(lambda: check(list(self.spans)), timeout=within):
                names = sorted(span.name for span in self.spans)
                raise AssertionError(f"spans never matched within {within} s: {names}")
            return list(self.spans)

    def named(self, name: str) -> list[Span]:
        with self.changed:
            return [span for span in self.spans if span.name == name]


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-type") != "application/x-protobuf":
                self.send_error(415)
                return
            if self.path == "/v1/traces":
                receiver.add_traces(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                receiver.add_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A started receiver on a free loopback port; stopped afterwards."""
    receiver = OtlpReceiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
