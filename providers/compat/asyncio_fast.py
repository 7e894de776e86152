"""asyncio internals the upstream connections' idle check reads (asyncio comes with Python,
which the image pins; the check guards another interpreter).

Before httpcore reuses an idle pooled connection it asks the stream ``is_readable``: one the
server closed, or wrote to unasked, must not carry the next request. The loop reads the socket
as data comes, so such bytes sit in the ``asyncio.StreamReader``'s buffer, not in the socket
(``providers.transports.network``); whether they do is the reader's private state.

Internals touched (checked at start-up by :data:`ASYNCIO`, through
``providers.compat.check_fast_paths``; any mismatch: one warning, and every idle connection
counts as readable, so it is closed and a new one opened instead of being reused):

- ``asyncio.StreamReader``: the ``_buffer`` its ``__init__`` sets (a ``bytearray``).

With ``[gateway] fast_paths = false`` the upstream pool is httpx's own, on anyio's streams,
and none of this is read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from providers.compat.probe import FastPath, assigns

__all__ = ["ASYNCIO", "buffered"]


def _check(problems: list[str]) -> bool:
    return assigns(asyncio.StreamReader.__init__, ["_buffer"], problems)


#: Whether the StreamReader's buffer can be read, checked once.
ASYNCIO: FastPath[bool] = FastPath("asyncio", _check)


def buffered(reader: asyncio.StreamReader) -> bool:
    """Whether ``reader`` holds bytes nobody asked for (an idle connection must not); True
    when that cannot be known (the public path: the connection is not reused)."""
    if ASYNCIO.internals() is None:
        return True
    buffer: Any = getattr(reader, "_buffer", None)
    return buffer is None or len(buffer) > 0
