"""Fast paths that read a dependency's private internals: one module per package, each with its
start-up check (``providers.compat.probe``); ``[gateway] fast_paths = false`` forces the public
paths."""

from providers.compat.asyncio_fast import ASYNCIO
from providers.compat.h11_fast import H11
from providers.compat.httpcore_fast import HTTPCORE
from providers.compat.httpx_fast import HTTPX

__all__ = ["check_fast_paths"]


def check_fast_paths() -> None:
    """Run each package's check now (at start-up: a transport with fast paths is built with
    its provider), not at the first request; each warns once on a mismatch."""
    HTTPX.internals()
    HTTPCORE.internals()
    H11.internals()
    ASYNCIO.internals()
