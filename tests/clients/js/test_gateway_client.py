"""clients/js/src/gateway-client.js under Node (fake EventSource and fetch)."""

from __future__ import annotations

from tests.clients.js.support import run_node_tests


def test_gateway_client_node_tests_pass() -> None:
    run = run_node_tests("gateway-client.test.js")
    assert run.returncode == 0, run.output
    assert run.counts["fail"] == 0 and run.counts["skipped"] == 0, run.output
    assert run.counts["pass"] == 2, run.output
