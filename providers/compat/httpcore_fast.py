"""httpcore internals the SSE transport's fast paths read (httpcore is pinned exactly in
pyproject).

Two fast paths (see ``BENCHMARKS.md``, "Private internals: fast paths on and off"):

- :class:`LinearConnectionPool`: httpcore 1.0's ``_assign_requests_to_connections`` (run at
  every request start and every response close) counts the whole pool once per idle
  connection and polls every idle connection (``has_expired``) at every call: C² per burst of
  C streams starting or ending together. This override counts once per call, walks and polls
  the connections at most every ``SWEEP_SECONDS`` (or when the pool is full), and always polls
  the one it hands out: a connection the upstream closed (or past its keep-alive) is never
  reused, as with httpcore. Its connections' locks take no loop turn when free
  (:func:`without_turn`).
- :func:`http11_parts`: the h11 state and network stream of a streamed HTTP/1.1 body, which
  ``providers.transports.http11_body`` reads in one loop instead of five nested generators.

Internals touched (checked at the first use by :data:`HTTPCORE`; any mismatch: one warning
and httpx's own pool and body stream):

- ``httpcore.AsyncConnectionPool._assign_requests_to_connections(self)`` (overridden), and the
  ``_connections``, ``_requests``, ``_max_connections``, ``_max_keepalive_connections``,
  ``_network_backend`` its ``__init__`` sets;
- ``httpcore._async.connection_pool.AsyncPoolRequest``'s ``is_queued(self)``,
  ``assign_to_connection(self, connection)``;
- ``httpcore._async.connection.AsyncHTTPConnection``: ``_connection``, ``_request_lock``;
- ``httpcore._async.http11.AsyncHTTP11Connection``: ``_state_lock``, ``_h11_state``,
  ``_network_stream``;
- ``httpcore._synchronization.AsyncLock``: ``_backend`` and the ``_anyio_lock`` its ``setup``
  makes;
- ``httpcore._async.connection_pool.PoolByteStream(stream, pool_request, pool)``: ``_stream``;
- ``httpcore._async.http11.HTTP11ConnectionByteStream(connection, request)``: ``_connection``,
  ``_request``, ``_closed``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
import h11
import httpcore
from httpcore import AsyncConnectionInterface

from providers.compat.probe import FastPath, assigns, member, module_member, parameters

__all__ = [
    "HTTPCORE",
    "SWEEP_SECONDS",
    "HttpcoreInternals",
    "LinearConnectionPool",
    "http11_parts",
    "linear_pool",
    "without_turn",
]

#: How often the idle connections are all polled (expired ones closed); well below the 4 s
#: keep-alive expiry of the SSE transport.
SWEEP_SECONDS = 0.5


@dataclass(frozen=True)
class HttpcoreInternals:
    lock: Any  # a class (Any: its private attributes are read)
    pool_stream: Any  # a class (Any: its private attributes are read)
    http11_stream: Any  # a class (Any: its private attributes are read)
    http11_connection: Any  # a class (Any: its private attributes are read)


def _check(problems: list[str]) -> HttpcoreInternals | None:
    pool = httpcore.AsyncConnectionPool
    assign = member(pool, "_assign_requests_to_connections", problems)
    if assign is not None:
        parameters(assign, ["self"], problems)
    assigns(
        pool.__init__,
        [
            "_connections",
            "_requests",
            "_max_connections",
            "_max_keepalive_connections",
            "_network_backend",
        ],
        problems,
    )
    request = module_member("httpcore._async.connection_pool", "AsyncPoolRequest", problems)
    if request is not None:
        for name, expected in (
            ("is_queued", ["self"]),
            ("assign_to_connection", ["self", "connection"]),
        ):
            method = member(request, name, problems)
            if method is not None:
                parameters(method, expected, problems)
    connection = module_member("httpcore._async.connection", "AsyncHTTPConnection", problems)
    if connection is not None:
        assigns(connection.__init__, ["_connection", "_request_lock"], problems)
    http11 = module_member("httpcore._async.http11", "AsyncHTTP11Connection", problems)
    if http11 is not None:
        assigns(http11.__init__, ["_state_lock", "_h11_state", "_network_stream"], problems)
        if not isinstance(getattr(http11, "READ_NUM_BYTES", None), int):
            problems.append("AsyncHTTP11Connection.READ_NUM_BYTES is not an int")
    lock = module_member("httpcore._synchronization", "AsyncLock", problems)
    if lock is not None:
        assigns(lock.__init__, ["_backend"], problems)
        setup = member(lock, "setup", problems)
        if setup is not None:
            assigns(setup, ["_anyio_lock"], problems)
    pool_stream = module_member("httpcore._async.connection_pool", "PoolByteStream", problems)
    if pool_stream is not None and parameters(
        pool_stream.__init__, ["self", "stream", "pool_request", "pool"], problems
    ):
        assigns(pool_stream.__init__, ["_stream"], problems)
    http11_stream = module_member("httpcore._async.http11", "HTTP11ConnectionByteStream", problems)
    if http11_stream is not None and parameters(
        http11_stream.__init__, ["self", "connection", "request"], problems
    ):
        assigns(http11_stream.__init__, ["_connection", "_request", "_closed"], problems)
    if None in (lock, pool_stream, http11_stream, http11):
        return None
    return HttpcoreInternals(lock, pool_stream, http11_stream, http11)


#: httpcore's internals, checked once.
HTTPCORE: FastPath[HttpcoreInternals | None] = FastPath("httpcore", _check)


def without_turn(lock: object) -> None:
    """Make one of httpcore's ``AsyncLock``s (not held) take anyio's lock without a loop turn
    when it is free (``fast_acquire``); a held or unknown lock is left as it is.

    anyio's lock yields to the loop on every acquire, free or not; an upstream request takes
    three (the connection's request lock, its HTTP/1.1 state lock at the start and at the
    close), and every task ready at that moment ran before the request went out.
    """
    internals = HTTPCORE.internals()
    if internals is None or type(lock) is not internals.lock or lock.__dict__.get("_turnless"):
        return
    current = lock.__dict__.get("_anyio_lock")
    if current is not None and current.locked():
        return
    held: Any = lock
    held._backend = "asyncio"  # this pool runs on asyncio only (its network backend)
    held._anyio_lock = anyio.Lock(fast_acquire=True)
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
        # the sweep unless its place is needed.
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


def linear_pool(pool: object, network_backend: httpcore.AsyncNetworkBackend) -> bool:
    """Turn httpx's ``httpcore.AsyncConnectionPool`` into a :class:`LinearConnectionPool` on
    ``network_backend``; False (nothing changed) when httpcore's internals do not match."""
    if HTTPCORE.internals() is None or type(pool) is not httpcore.AsyncConnectionPool:
        return False
    pool.__class__ = LinearConnectionPool
    changed: Any = pool
    changed._network_backend = network_backend
    return True


def http11_parts(stream: object) -> tuple[h11.Connection, Any, int, float | None] | None:
    """For httpcore's pooled body stream of an HTTP/1.1 response not yet read: its h11 state,
    network stream, read size and read timeout; ``None`` for any other shape (HTTP/2, a
    ``trace`` extension, other internals)."""
    internals = HTTPCORE.internals()
    if internals is None or type(stream) is not internals.pool_stream:
        return None
    pooled: Any = stream
    inner: Any = pooled._stream
    if type(inner) is not internals.http11_stream or inner._closed:
        return None
    connection: Any = inner._connection
    request: httpcore.Request = inner._request
    if not isinstance(connection, internals.http11_connection) or "trace" in request.extensions:
        return None
    state = getattr(connection, "_h11_state", None)
    network = getattr(connection, "_network_stream", None)
    size = getattr(connection, "READ_NUM_BYTES", None)
    if not isinstance(state, h11.Connection) or network is None or type(size) is not int:
        return None
    return state, network, size, request.extensions.get("timeout", {}).get("read")
