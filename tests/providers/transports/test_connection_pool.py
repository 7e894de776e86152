"""The SSE transport's connection pool (``max_connections``) against a real loopback upstream:
the default admits far more concurrent runs than httpx's 100, and a run that finds no free
connection within ``timeout_seconds`` ends ``run.failed`` instead of waiting silently."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from providers.agent_event import AgentEventProvider
from providers.registry import network_transport
from providers.testing import make_options, run_collect
from providers.transports import DEFAULT_MAX_CONNECTIONS, SSETransport
from tests.providers.support.loopback import serve_loopback

BOUND_SECONDS = 5.0  # generous: the machine is shared


async def _until(condition: Callable[[], bool], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def _provider(url: str, transport: SSETransport) -> AgentEventProvider:
    return AgentEventProvider("native", url, transport)


async def test_pool_exhausted_run_fails_cleanly_within_timeout() -> None:
    async with serve_loopback() as loopback:
        holder_transport = SSETransport(max_connections=1, timeout_seconds=30)
        waiter_transport = SSETransport(max_connections=1, timeout_seconds=0.5)
        # One pool: the waiter's client, whose only connection the holder takes.
        holder_transport._client = waiter_transport._get_client()
        holder_options = make_options(run_id="run_holder", now=None)
        holder = asyncio.create_task(
            run_collect(
                _provider(f"http://{loopback.url}/sse/stall", holder_transport),
                {"prompt": "hold"},
                options=holder_options,
            )
        )
        await asyncio.wait_for(loopback.connected.wait(), 10)

        started = time.monotonic()
        events = await asyncio.wait_for(
            run_collect(
                _provider(f"http://{loopback.url}/sse/slow?count=2&delay=0", waiter_transport),
                {"prompt": "wait"},
                options=make_options(run_id="run_waiter"),
            ),
            BOUND_SECONDS + 5,
        )
        elapsed = time.monotonic() - started

        assert events[-1]["type"] == "run.failed"
        error = events[-1]["payload"]["error"]
        assert error["code"] == "upstream_timeout"
        assert error["retryable"] is True
        assert 0.4 <= elapsed < BOUND_SECONDS
        # It never reached the upstream, and the holder still streams on its connection.
        assert len(loopback.requests) == 1
        assert not holder.done() and not loopback.disconnected.is_set()

        holder_options.signal.abort()
        held = await asyncio.wait_for(holder, 10)
        assert held[-1]["type"] == "run.cancelled"

        # The freed connection serves the next run.
        events = await run_collect(
            _provider(f"http://{loopback.url}/sse/slow?count=2&delay=0", waiter_transport),
            {"prompt": "again"},
        )
        assert events[-1]["type"] == "run.completed"
        await waiter_transport.aclose()


async def test_default_pool_streams_more_runs_at_once_than_httpx_default() -> None:
    concurrent = 150  # httpx's own default pool stops at 100
    async with serve_loopback() as loopback:
        transport = SSETransport()
        provider = _provider(f"http://{loopback.url}/sse/stall", transport)
        options = [make_options(run_id=f"run_{i}", now=None) for i in range(concurrent)]
        runs = [
            asyncio.create_task(run_collect(provider, {"prompt": "go"}, options=o)) for o in options
        ]
        await _until(lambda: len(loopback.requests) == concurrent)
        for o in options:
            o.signal.abort()
        results: list[list[dict[str, Any]]] = await asyncio.wait_for(asyncio.gather(*runs), 30)
        await transport.aclose()
    assert all(events[-1]["type"] == "run.cancelled" for events in results)


def test_max_connections_comes_from_the_provider_config() -> None:
    transport = network_transport({"max_connections": 3})
    assert isinstance(transport, SSETransport)
    assert transport.max_connections == 3
    default = network_transport({})
    assert isinstance(default, SSETransport)
    assert default.max_connections == DEFAULT_MAX_CONNECTIONS >= 1000
    with pytest.raises(ValueError, match="max_connections"):
        SSETransport(max_connections=0)


def test_idle_connections_expire_before_common_servers_close_them() -> None:
    # uvicorn and Node close an idle keep-alive connection after 5 s; a connection reused in
    # that instant fails its run. The pool lets idle connections go first.
    transport = SSETransport()
    pool = transport._get_client()._transport._pool  # type: ignore[attr-defined]
    assert 0 < pool._keepalive_expiry < 5.0
