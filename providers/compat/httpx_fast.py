"""httpx internals the SSE transport's fast paths read (httpx is pinned exactly in pyproject).

Internals touched (checked at the first use by :data:`HTTPX`; any mismatch: one warning and
the public path, ``httpx.AsyncHTTPTransport`` read through ``response.stream``):

- ``httpx._client.BoundAsyncStream`` (``__init__(self, stream, response, start)``) and its
  ``_stream``: the client's wrapper of a streamed response's body;
- ``httpx._transports.default.AsyncResponseStream`` (``__init__(self, httpcore_stream)``) and
  its ``_httpcore_stream``: the default transport's wrapper of httpcore's body stream;
- ``httpx.AsyncHTTPTransport.__init__`` setting ``_pool``: the transport's httpcore pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from providers.compat.probe import FastPath, assigns, module_member, parameters

__all__ = ["HTTPX", "HttpxInternals", "httpcore_pool", "httpcore_stream"]


@dataclass(frozen=True)
class HttpxInternals:
    bound_stream: Any  # a class (Any: its private attributes are read)
    response_stream: Any  # a class (Any: its private attributes are read)


def _check(problems: list[str]) -> HttpxInternals | None:
    bound = module_member("httpx._client", "BoundAsyncStream", problems)
    if bound is not None and parameters(
        bound.__init__, ["self", "stream", "response", "start"], problems
    ):
        assigns(bound.__init__, ["_stream"], problems)
    outer = module_member("httpx._transports.default", "AsyncResponseStream", problems)
    if outer is not None and parameters(outer.__init__, ["self", "httpcore_stream"], problems):
        assigns(outer.__init__, ["_httpcore_stream"], problems)
    assigns(httpx.AsyncHTTPTransport.__init__, ["_pool"], problems)
    if bound is None or outer is None:
        return None
    return HttpxInternals(bound, outer)


#: httpx's internals, checked once.
HTTPX: FastPath[HttpxInternals | None] = FastPath("httpx", _check)


def httpcore_stream(response: httpx.Response) -> Any:
    """The httpcore body stream under a streamed response of ``httpx.AsyncHTTPTransport``
    (``None`` for another transport or when httpx's internals do not match)."""
    internals = HTTPX.internals()
    if internals is None:
        return None
    bound: Any = response.stream
    if type(bound) is not internals.bound_stream:
        return None
    outer: Any = bound._stream
    if type(outer) is not internals.response_stream:
        return None
    return outer._httpcore_stream


def httpcore_pool(transport: httpx.AsyncHTTPTransport) -> Any:
    """The httpcore pool of ``transport`` (``None`` when httpx's internals do not match)."""
    if HTTPX.internals() is None:
        return None
    return getattr(transport, "_pool", None)
