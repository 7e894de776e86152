"""The upstream connection pool, with upkeep linear in its size (httpcore's is quadratic).

httpcore 1.0's ``_assign_requests_to_connections`` (run at every request start and every
response close) counts the whole pool once per idle connection. The SSE transport keeps up to
``max_connections`` idle connections for reuse, so with C streams starting or ending together
each of those 2·C calls cost C², and C = 200 streams took seconds of CPU in one burst: the first
deltas of every stream waited for it (py-spy: ~18 % of the gateway's CPU in a capacity run).
It also asks every idle connection ``has_expired`` (a ``poll`` of its socket) at every call:
still C² polls per burst (~10 %). :class:`LinearConnectionPool` counts once per call, walks and
polls the connections at most every ``SWEEP_SECONDS`` (or when the pool is full), and always
polls the one it hands out: a connection the upstream closed (or past its keep-alive) is never
reused, as with httpcore.

Its connections' locks take no loop turn when free (:func:`without_turn`).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpcore
import httpx
from httpcore import AsyncConnectionInterface
from httpcore._synchronization import AsyncLock

from providers.transports.network import AsyncioBackend

__all__ = ["SWEEP_SECONDS", "LinearConnectionPool", "pooled_transport", "without_turn"]

#: How often the idle connections are all polled (expired ones closed); well below the 4 s
#: keep-alive expiry of the SSE transport.
SWEEP_SECONDS = 0.5


def without_turn(lock: object) -> None:
    """Make one of httpcore's ``AsyncLock``s (not held) take anyio's lock without a loop turn
    when it is free (``fast_acquire``); a held or unknown lock is left as it is.

    anyio's lock yields to the loop on every acquire, free or not; an upstream request takes
    three (the connection's request lock, its HTTP/1.1 state lock at the start and at the
    close), and every task ready at that moment ran before the request went out: on a run
    start, the response's whole setup (~0.2 ms) came between the runner and its upstream.
    """
    if type(lock) is not AsyncLock or lock.__dict__.get("_turnless"):
        return
    current = lock.__dict__.get("_anyio_lock")
    if current is not None and current.locked():
        return
    lock._backend = "asyncio"  # this pool runs on asyncio only (its network backend)
    lock._anyio_lock = anyio.Lock(fast_acquire=True)
    lock.__dict__["_turnless"] = True


class LinearConnectionPool(httpcore.AsyncConnectionPool):
    """httpcore's pool; the same upkeep (closed, expired, surplus idle connections, then the
    queued requests), with the pool size read once per connection, not counted, and expired
    connections found by a sweep at most every ``SWEEP_SECONDS`` or when about to be reused."""

    _next_sweep = 0.0

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        closing: list[AsyncConnectionInterface] = []
        connections = self._connections
        keep_idle = self._max_keepalive_connections
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_SECONDS
        # Between sweeps the pool is walked only when it is over its idle or total limit: a
        # closed connection is never handed out (not available), so dropping it can wait for
        # the sweep unless its place is needed (a walk per request start and end was ~9 % of a
        # run's own CPU with 100 streams pooled: py-spy, 100 runs of 2 deltas).
        if sweep or len(connections) > keep_idle or len(connections) >= self._max_connections:
            for connection in list(connections):
                if connection.is_closed():
                    connections.remove(connection)
                elif sweep and connection.has_expired():
                    connections.remove(connection)
                    closing.append(connection)
                # httpcore compares len([c.is_idle() for c in connections]): the pool's size.
                elif connection.is_idle() and len(connections) > keep_idle:
                    connections.remove(connection)
                    closing.append(connection)
        for pool_request in [request for request in self._requests if request.is_queued()]:
            origin = pool_request.request.url.origin
            available = self._reusable(origin, closing)
            if available is not None:
                pool_request.assign_to_connection(available)
            elif len(connections) < self._max_connections:
                connection = self.create_connection(origin)
                connections.append(connection)
                pool_request.assign_to_connection(connection)
            else:
                idle = next((c for c in connections if c.is_idle()), None)
                if idle is not None:
                    connections.remove(idle)
                    closing.append(idle)
                    connection = self.create_connection(origin)
                    connections.append(connection)
                    pool_request.assign_to_connection(connection)
        return closing

    def _reusable(
        self, origin: httpcore.Origin, closing: list[AsyncConnectionInterface]
    ) -> AsyncConnectionInterface | None:
        """The first connection that can take a request to ``origin``, polled first when idle
        (an expired one is closed and the next is tried)."""
        expired: list[AsyncConnectionInterface] = []
        found: AsyncConnectionInterface | None = None
        for connection in self._connections:
            if not (connection.can_handle_request(origin) and connection.is_available()):
                continue
            if connection.is_idle() and connection.has_expired():
                expired.append(connection)
                continue
            found = connection
            break
        for connection in expired:
            self._connections.remove(connection)
            closing.append(connection)
        if found is not None:  # its HTTP/1.1 connection's lock exists once it has connected
            without_turn(getattr(getattr(found, "_connection", None), "_state_lock", None))
        return found

    def create_connection(self, origin: httpcore.Origin) -> AsyncConnectionInterface:
        connection = super().create_connection(origin)
        without_turn(getattr(connection, "_request_lock", None))
        return connection


def pooled_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's default transport for ``limits``, on a :class:`LinearConnectionPool` (httpx's
    own pool when this httpcore has another shape)."""
    transport = httpx.AsyncHTTPTransport(limits=limits)
    pool: Any = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and hasattr(
        pool, "_assign_requests_to_connections"
    ):
        pool.__class__ = LinearConnectionPool
        if hasattr(pool, "_network_backend"):
            pool._network_backend = AsyncioBackend()
    return transport
