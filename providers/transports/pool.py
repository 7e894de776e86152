"""The upstream connection pool of the SSE transport: httpx's ``AsyncHTTPTransport`` for the
given limits, with the fast paths (when asked and httpx's and httpcore's internals match) of a
:class:`~providers.compat.httpcore_fast.LinearConnectionPool` on the
:class:`~providers.transports.network.AsyncioBackend`."""

from __future__ import annotations

import httpx

from providers.compat.httpcore_fast import linear_pool
from providers.compat.httpx_fast import httpcore_pool
from providers.transports.network import AsyncioBackend

__all__ = ["pooled_transport"]


def pooled_transport(limits: httpx.Limits, *, fast_paths: bool = True) -> httpx.AsyncHTTPTransport:
    """httpx's default transport for ``limits``; with ``fast_paths``, on a linear pool and the
    asyncio backend (httpx's own pool when the internals that takes do not match)."""
    transport = httpx.AsyncHTTPTransport(limits=limits)
    if fast_paths:
        linear_pool(httpcore_pool(transport), AsyncioBackend())
    return transport
