"""The plain chunks of a chunked HTTP/1.1 body, decoded without h11; anything else is h11's.

h11 spends pure Python on each chunk (its reader, its state machine, a ``Data`` event); an upstream
streaming one delta per chunk pays that per delta, a large share of the gateway's CPU per event.
:class:`ChunkDecoder` takes only the common shape, a hex size on a line of its own, that many bytes,
``CRLF``, for a fraction of that (BENCHMARKS.md, "Costs behind the code's shortcuts"), and hands
everything else back from a chunk boundary: chunk extensions, the last chunk and its trailers, any
malformed header. h11 then reads those bytes from that boundary as it would have, so every check of
the framing stays h11's except the two this decoder makes itself, mid-chunk, where h11 cannot take
over: the ``CRLF`` after a chunk's data, and a body that ends inside a chunk (h11's own messages for
both).
"""

from __future__ import annotations

import re

__all__ = ["ChunkDecoder", "ChunkFramingError"]

# One chunk-size line with no extension: h11 allows up to 20 hex digits, 16 fit 64 bits.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})\r\n")
# What can still become such a line once more bytes arrive.
_SIZE_LINE_START = re.compile(rb"[0-9A-Fa-f]{0,16}\r?")

INCOMPLETE = (
    "peer closed connection without sending complete message body (incomplete chunked read)"
)


class ChunkFramingError(Exception):
    """The framing broke inside a chunk (h11's message for it); ``pieces``: the body bytes
    decoded before it, in the same call."""

    def __init__(self, message: str, pieces: list[bytes]) -> None:
        super().__init__(message)
        self.pieces = pieces


class ChunkDecoder:
    """Feed the bytes of each read from a chunk boundary on; get the body bytes they carry, and,
    once a chunk this decoder does not take begins, the bytes from that chunk's start (for h11,
    which is still at the boundary where this decoder took over)."""

    __slots__ = ("_footer", "_head", "_left")

    def __init__(self) -> None:
        self._left = 0  # data bytes still to come in the current chunk
        self._footer = b""  # the part of the current chunk's closing CRLF still to come
        self._head = b""  # the start of a size line whose end has not arrived

    @property
    def at_boundary(self) -> bool:
        """No chunk is open: the decoder stopped between two chunks (perhaps in a size line)."""
        return not self._left and not self._footer

    def feed(self, data: bytes) -> tuple[list[bytes], bytes | None]:
        """The body bytes in ``data`` (pieces in order) and the bytes handed back, if a chunk
        this decoder does not take starts in ``data`` (``None`` otherwise; nothing is fed after
        that). Raises :class:`ChunkFramingError` for a chunk not closed by ``CRLF``."""
        if self._head:
            data = self._head + data
            self._head = b""
        pieces: list[bytes] = []
        match = _SIZE_LINE.match
        pos = 0
        end = len(data)
        while pos < end:
            left = self._left
            if left:
                stop = pos + left
                if stop > end:
                    pieces.append(data[pos:])
                    self._left = stop - end
                    return pieces, None
                pieces.append(data[pos:stop])
                pos = stop
                self._left = 0
                self._footer = b"\r\n"
                continue
            footer = self._footer
            if footer:
                got = data[pos : pos + len(footer)]
                if got != footer[: len(got)]:
                    message = f"malformed chunk footer: {got!r} (expected {footer!r})"
                    raise ChunkFramingError(message, pieces)
                pos += len(got)
                self._footer = footer[len(got) :]
                continue
            line = match(data, pos)
            if line is None:
                rest = data[pos:]
                if _SIZE_LINE_START.fullmatch(rest):
                    self._head = rest
                    return pieces, None
                return pieces, rest
            size = int(line[1], 16)
            if not size:  # the last chunk: its trailers and the end of the message are h11's
                return pieces, data[pos:]
            pos = line.end()
            stop = pos + size
            if data[stop : stop + 2] == b"\r\n":
                # The whole chunk and its CRLF are in this read (nearly always): taken at once,
                # not through the open-chunk and footer states (cheaper per chunk).
                pieces.append(data[pos:stop])
                pos = stop + 2
                continue
            self._left = size
        return pieces, None

    def end(self) -> bytes:
        """The body ended (EOF): the bytes to hand back at a boundary (a size line's start,
        perhaps empty), for h11 to read with the EOF. Raises :class:`ChunkFramingError` inside
        a chunk."""
        if not self.at_boundary:
            raise ChunkFramingError(INCOMPLETE, [])
        head, self._head = self._head, b""
        return head
