"""schemathesis against the committed ``openapi/openapi.json``, the gateway on loopback.

The gateway runs in its own thread (own event loop, real uvicorn, a free port); every
non-streaming operation gets a bounded number of generated requests: no 5xx, every status code
documented, every body matching its schema and content type. The streaming routes (events, ws,
runs?stream=true, wait, ag-ui) are covered by their own tests.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
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
from tests.app.gateway_server import make_settings

OPENAPI = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
STREAMING = r"/(events|ws|wait)$|^/v1/ag-ui/"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

schema = schemathesis.openapi.from_path(OPENAPI).exclude(path_regex=STREAMING)


TOKEN = "schema-token"
PUBLIC = ("/healthz", "/")  # liveness and the demo page (no data)


def _serve(auth: dict[str, object]) -> Iterator[str]:
    import uvicorn

    app = create_app(
        make_settings(
            limits={"runs_per_minute_per_principal": 1_000_000},
            gateway={"max_body_bytes": 65536},
            auth=auth,
        )
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = GatewayServer(config, install_signal_handlers=False)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    yield from _serve({"mode": "none"})


@pytest.fixture(scope="module")
def bearer_gateway_url() -> Iterator[str]:
    yield from _serve({"mode": "bearer", "tokens": {TOKEN: "alice"}})


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
        if headers["Authorization"].endswith("wrong") and case.path not in PUBLIC:
            assert response.status_code >= 400, (case.method, case.path, response.text)
