"""schemathesis against the committed ``openapi/openapi.json``, the gateway on loopback.

On each backend, the gateway runs in its own thread (own event loop, real uvicorn, a free port);
every non-streaming operation gets a bounded number of generated requests: no 5xx, every status
code documented, every body matching its schema and content type; with auth on, a wrong token is
a 401 ``unauthorized``. The streaming routes (events, ws, runs?stream=true, wait, ag-ui) are
covered by their own tests.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.factory import create_app
from app.server import GatewayServer
from tests.app.support.gateway_server import make_settings, redis_backend_for
from tests.app.support.redis_support import shared_redis, unique_prefix

OPENAPI = Path(__file__).resolve().parents[3] / "openapi" / "openapi.json"
STREAMING = r"/(events|ws|wait)$|^/v1/ag-ui/"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

schema = schemathesis.openapi.from_path(OPENAPI).exclude(path_regex=STREAMING)


TOKEN = "schema-token"
PUBLIC = ("/healthz", "/readyz", "/")  # liveness, readiness and the demo page (no data)
AUTH: dict[str, dict[str, object]] = {
    "none": {"mode": "none"},
    "bearer": {"mode": "bearer", "tokens": {TOKEN: "alice"}},
}


class Gateways:
    """The module's gateways, one per backend and auth mode, each started by the first test
    that needs it (in that test's backend run) and serving the rest of the module."""

    def __init__(self) -> None:
        self.prefix = unique_prefix()  # the Redis gateways' keys, deleted at the end
        self.urls: dict[tuple[str, str], str] = {}
        self.stops: list[Callable[[], None]] = []

    def url(self, backend_kind: str, auth: str) -> str:
        if (backend_kind, auth) not in self.urls:
            self.urls[backend_kind, auth] = self._serve(backend_kind, AUTH[auth])
        return self.urls[backend_kind, auth]

    def _serve(self, backend_kind: str, auth: dict[str, object]) -> str:
        import uvicorn

        settings = make_settings(
            limits={"runs_per_minute_per_principal": 1_000_000},
            gateway={"max_body_bytes": 65536},
            auth=auth,
        )
        backend = None
        if backend_kind == "redis":
            backend = redis_backend_for(settings, self.prefix, f"schema-{len(self.urls)}")
        app = create_app(settings, backend=backend)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        server = GatewayServer(config, install_signal_handlers=False)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()

        def stop() -> None:
            server.should_exit = True
            thread.join(30)

        self.stops.append(stop)
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.01)
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        for stop in self.stops:
            stop()

        async def drop_keys() -> None:
            async with shared_redis(self.prefix):
                pass

        asyncio.run(drop_keys())


@pytest.fixture(scope="module")
def gateways() -> Iterator[Gateways]:
    running = Gateways()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def gateway_url(gateways: Gateways, backend_kind: str) -> str:
    return gateways.url(backend_kind, "none")


@pytest.fixture
def bearer_gateway_url(gateways: Gateways, backend_kind: str) -> str:
    return gateways.url(backend_kind, "bearer")


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_openapi_conformance(case: schemathesis.Case[Any], gateway_url: str) -> None:
    if case.query and "stream" in case.query:
        case.query["stream"] = "false"  # the SSE answer is covered by the stream tests
    response = case.call(base_url=gateway_url, timeout=10)
    case.validate_response(response, checks=CHECKS)


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_openapi_conformance_with_bearer_auth(
    case: schemathesis.Case[Any], bearer_gateway_url: str
) -> None:
    """With auth on, every operation documents what it answers, with or without a token."""
    if case.query and "stream" in case.query:
        case.query["stream"] = "false"
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer wrong"}):
        response = case.call(base_url=bearer_gateway_url, headers=headers, timeout=10)
        case.validate_response(response, checks=CHECKS)
        # schemathesis also sends methods the path does not have: no route, 405 before any auth
        own_method = case.method.upper() == case.operation.method.upper()
        if headers["Authorization"].endswith("wrong") and case.path not in PUBLIC and own_method:
            assert response.status_code == 401, (case.method, case.path, response.text)
            assert response.json()["error"]["code"] == "unauthorized", response.text
