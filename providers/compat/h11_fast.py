"""h11 internals the chunked-body fast path reads (h11 is pinned exactly in pyproject).

``providers.transports.http11_body`` decodes the plain chunks of a chunked body itself
(``providers.transports.chunked``) when h11 stands between two chunks with nothing buffered,
and hands every other byte to h11. Whether it stands there is h11's private state.

Internals touched (checked at the first use by :data:`H11`; any mismatch: one warning, and
h11 reads the whole body):

- ``h11.Connection``: the ``_reader`` and ``_receive_buffer`` its ``__init__`` sets;
- ``h11._readers.ChunkedReader``: ``_bytes_in_chunk``, ``_bytes_to_discard``,
  ``_reading_trailer``.
"""

from __future__ import annotations

from typing import Any

import h11

from providers.compat.probe import FastPath, assigns, module_member

__all__ = ["H11", "between_chunks"]


def _check(problems: list[str]) -> type | None:
    assigns(h11.Connection.__init__, ["_reader", "_receive_buffer"], problems)
    reader = module_member("h11._readers", "ChunkedReader", problems)
    if reader is not None:
        assigns(
            reader.__init__, ["_bytes_in_chunk", "_bytes_to_discard", "_reading_trailer"], problems
        )
    return reader if isinstance(reader, type) else None


#: h11's chunked reader type, checked once.
H11: FastPath[type | None] = FastPath("h11", _check)


def between_chunks(state: h11.Connection, chunked_reader: type | None) -> bool:
    """h11 reads a chunked body and stands between two chunks with nothing buffered: the next
    bytes start a chunk. ``chunked_reader`` is ``H11.internals()``, read once per body by the
    caller (this runs once per network read). Read defensively: any other shape is "no" (h11
    reads on its own)."""
    reader: Any = getattr(state, "_reader", None)
    if chunked_reader is None or type(reader) is not chunked_reader:
        return False
    buffered: Any = getattr(state, "_receive_buffer", None)
    return (
        getattr(reader, "_bytes_in_chunk", None) == 0
        and getattr(reader, "_bytes_to_discard", None) == b""
        and getattr(reader, "_reading_trailer", None) is False
        and buffered is not None
        and len(buffered) == 0
    )
