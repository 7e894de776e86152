"""The SSE transport's pool makes httpcore's decisions (closed, expired, surplus idle, queued
requests) at a cost linear in its size: C streams starting or ending together no longer cost C³."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, cast

import httpcore

from providers.compat.httpcore_fast import SWEEP_SECONDS, LinearConnectionPool
from providers.signal import AbortSignal
from providers.transports import SSETransport, UpstreamRequest
from tests.loopback_asgi import serve_asgi


class FakeConnection:
    """A pooled connection in a given state; counts ``is_idle`` calls."""

    calls = 0

    def __init__(self, state: str) -> None:
        self.state = state

    def is_closed(self) -> bool:
        return self.state == "closed"

    def has_expired(self) -> bool:
        return self.state == "expired"

    def is_idle(self) -> bool:
        FakeConnection.calls += 1
        return self.state == "idle"

    def is_available(self) -> bool:
        return self.state == "idle"

    def can_handle_request(self, origin: Any) -> bool:
        return True


def _pool(cls: type[httpcore.AsyncConnectionPool], states: list[str], keep: int) -> Any:
    pool: Any = cls(max_connections=len(states) + 10, max_keepalive_connections=keep)
    pool._connections = [FakeConnection(state) for state in states]
    return pool


def test_the_same_connections_are_kept_and_closed_as_by_httpcore() -> None:
    states = ["idle", "busy", "closed", "expired", "idle", "busy", "idle", "idle"]
    for keep in (0, 2, 5, 100):
        ours, theirs = (
            _pool(LinearConnectionPool, states, keep),
            _pool(httpcore.AsyncConnectionPool, states, keep),
        )
        closing_ours = [c.state for c in ours._assign_requests_to_connections()]
        closing_theirs = [c.state for c in theirs._assign_requests_to_connections()]
        assert closing_ours == closing_theirs
        assert [c.state for c in ours._connections] == [c.state for c in theirs._connections]


class FakeRequest:
    """A request queued in the pool."""

    def __init__(self) -> None:
        self.request = httpcore.Request("GET", "http://upstream/")
        self.connection: Any = None

    def is_queued(self) -> bool:
        return self.connection is None

    def assign_to_connection(self, connection: Any) -> None:
        self.connection = connection


def test_a_connection_that_expired_since_the_last_sweep_is_never_reused() -> None:
    pool = _pool(LinearConnectionPool, ["idle", "idle", "idle"], keep=10)
    assert pool._assign_requests_to_connections() == []  # swept: nothing expired yet
    first, second, third = pool._connections
    first.state = "expired"  # the upstream closed it; is_idle() is False, like httpcore's
    first.is_idle = lambda: True  # still idle on our side
    first.is_available = lambda: True
    request = FakeRequest()
    pool._requests = [request]
    closing = pool._assign_requests_to_connections()  # within SWEEP_SECONDS: no full sweep
    assert closing == [first]
    assert request.connection is second
    assert pool._connections == [second, third]


def test_upkeep_of_a_large_idle_pool_is_linear() -> None:
    n = 400
    pool = _pool(LinearConnectionPool, ["idle"] * n, keep=n)
    FakeConnection.calls = 0
    assert pool._assign_requests_to_connections() == []
    assert FakeConnection.calls <= 2 * n  # httpcore's own: n * (n + 1) = 160,400
    expiry_checks = 0

    def has_expired() -> bool:
        nonlocal expiry_checks
        expiry_checks += 1
        return False

    for connection in pool._connections:
        connection.has_expired = has_expired
    for _ in range(100):  # a burst of request starts and ends: no socket poll per connection
        pool._assign_requests_to_connections()
    assert expiry_checks == 0


def test_between_sweeps_the_pool_is_not_walked_and_a_closed_connection_is_not_handed_out(
    monkeypatch: Any,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("providers.compat.httpcore_fast.time.monotonic", lambda: now[0])
    n = 300
    pool = _pool(LinearConnectionPool, ["idle"] * n, keep=n)
    pool._next_sweep = 0.0
    assert pool._assign_requests_to_connections() == []  # the sweep
    walked = 0

    def counting_is_closed(connection: FakeConnection) -> bool:
        nonlocal walked
        walked += 1
        return connection.state == "closed"

    monkeypatch.setattr(FakeConnection, "is_closed", counting_is_closed)
    first = pool._connections[0]
    first.state = "closed"
    request = FakeRequest()
    pool._requests = [request]
    assert pool._assign_requests_to_connections() == []
    assert request.connection is pool._connections[1]  # the closed one is never handed out
    for _ in range(100):  # request starts and ends of a burst
        pool._assign_requests_to_connections()
    assert walked == 0
    assert first in pool._connections  # dropped by the next sweep
    now[0] += SWEEP_SECONDS
    pool._assign_requests_to_connections()
    assert first not in pool._connections and len(pool._connections) == n - 1


def test_a_full_pool_drops_its_closed_connections_at_once_to_make_room() -> None:
    pool: Any = LinearConnectionPool(max_connections=3, max_keepalive_connections=3)
    pool._connections = [FakeConnection(state) for state in ("busy", "closed", "busy")]
    pool._next_sweep = float("inf")  # no sweep due
    made: list[Any] = []

    def create_connection(origin: Any) -> Any:
        made.append(FakeConnection("busy"))
        return made[-1]

    pool.create_connection = create_connection
    request = FakeRequest()
    pool._requests = [request]
    pool._assign_requests_to_connections()
    assert request.connection is made[0]
    assert [c.state for c in pool._connections] == ["busy", "busy", "busy"]


async def test_the_transport_runs_on_the_linear_pool_and_reuses_connections() -> None:
    transport = SSETransport(max_connections=8)
    client = transport._get_client()
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool, LinearConnectionPool)
    assert pool._max_keepalive_connections == 8

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with serve_asgi(app, log_level="critical") as port:
        for _ in range(3):
            answers = await asyncio.gather(
                *(client.get(f"http://127.0.0.1:{port}/") for _ in range(6))
            )
            assert [a.status_code for a in answers] == [200] * 6
        assert len(pool.connections) == 6  # reused, not one per request
    await transport.aclose()


async def test_a_request_on_a_pooled_connection_goes_out_without_a_loop_turn(
    monkeypatch: Any,
) -> None:
    """Every task ready when a run sends its upstream request used to run first (httpcore's
    locks take a loop turn each, and the request ran in a task of its own): on a pooled
    connection the request is now written in the turn that asked for it."""
    import providers.transports.network as network

    loop = asyncio.get_running_loop()
    turns = 0
    ticking = True

    def tick() -> None:
        nonlocal turns
        turns += 1
        if ticking:
            loop.call_soon(tick)

    written_at: list[int] = []
    write = network.AsyncioStream.write

    async def counting_write(self: Any, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        written_at.append(turns)
        await write(self, buffer, timeout)

    monkeypatch.setattr(network.AsyncioStream, "write", counting_write)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: ok\n\n"})

    transport = SSETransport(max_connections=4)
    try:
        async with serve_asgi(app, log_level="critical") as port:
            request = UpstreamRequest(f"http://127.0.0.1:{port}/run", json={})
            for _ in range(2):  # the first connects (loop turns); the second reuses it
                written_at.clear()
                # SSETransport.open is an async generator: it has aclose.
                events = cast(AsyncGenerator[Any, None], transport.open(request, AbortSignal()))
                loop.call_soon(tick)
                asked_at = turns
                assert (await anext(events)).data == "ok"
                await events.aclose()
            ticking = False
    finally:
        await transport.aclose()
    assert written_at and written_at[0] == asked_at
