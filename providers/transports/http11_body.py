"""A streamed HTTP/1.1 body read straight off httpcore's connection, one loop for every read.

Through httpx, each read of a streamed body resumes five nested async generators (httpx's
bound and response streams, httpcore's pool stream, connection stream and body reader), a
coroutine, and two ``contextlib`` context managers that map exceptions. An upstream that
streams one delta per read pays all of that per delta: ~12 µs of the gateway's ~88 µs per
event here (``bench/throughput_bench.py``, one event per write), and at 40–90 answers of 50
deltas/s the gateway used 6–12 % more CPU than with it. :func:`direct_body` runs the loop of
httpcore's ``_receive_response_body`` itself, over the same h11 state and network stream,
with the two exception mappings entered once for the whole body.

Inside a chunked body, the plain chunks are decoded by :mod:`providers.transports.chunked`
instead of h11 (~0.6 µs a chunk instead of ~5); h11 reads every other chunk, from the boundary
where it stands, and the end of the message.

Everything else stays httpcore's: the request, the headers and the close. At the end of the
body h11 is ``DONE`` and ``response.aclose()`` hands the connection back to the pool; after
an error or an early stop, h11 is not done and ``aclose()`` closes the connection. Errors are
httpx's, as through ``aiter_raw()``. Any other shape of response (another transport, HTTP/2,
a ``trace`` extension) is left to httpx: :func:`direct_body` returns ``None``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import httpcore
import httpx
from httpcore._async.connection_pool import PoolByteStream
from httpcore._async.http11 import AsyncHTTP11Connection, HTTP11ConnectionByteStream
from httpcore._exceptions import map_exceptions
from httpx._client import BoundAsyncStream
from httpx._transports.default import AsyncResponseStream, map_httpcore_exceptions

from providers.transports.chunked import ChunkDecoder, ChunkFramingError

__all__ = ["direct_body"]


def _chunked_reader_type() -> type | None:
    try:
        from h11._readers import ChunkedReader
    except ImportError:  # another h11: its bodies are h11's alone
        return None
    return ChunkedReader


_CHUNKED_READER = _chunked_reader_type()

_H11_ERRORS: dict[type[Exception], type[Exception]] = {
    h11.RemoteProtocolError: httpcore.RemoteProtocolError
}


def direct_body(response: httpx.Response) -> AsyncIterator[bytes] | None:
    """The body of ``response`` (streamed, not yet read), one item per network read that
    carried body bytes (its chunks joined); ``None`` when it is not httpx over httpcore's
    HTTP/1.1 connection."""
    bound: Any = response.stream
    if type(bound) is not BoundAsyncStream:
        return None
    outer: Any = bound._stream
    if type(outer) is not AsyncResponseStream:
        return None
    pooled: Any = outer._httpcore_stream
    if type(pooled) is not PoolByteStream:
        return None
    stream: Any = pooled._stream
    if type(stream) is not HTTP11ConnectionByteStream or stream._closed:
        return None
    connection: Any = stream._connection
    request: httpcore.Request = stream._request
    if not isinstance(connection, AsyncHTTP11Connection) or "trace" in request.extensions:
        return None
    state = getattr(connection, "_h11_state", None)
    network = getattr(connection, "_network_stream", None)
    size = getattr(connection, "READ_NUM_BYTES", None)
    if not isinstance(state, h11.Connection) or network is None or type(size) is not int:
        return None  # not the httpcore 1.0 this reads the way of
    timeout = request.extensions.get("timeout", {}).get("read")
    return _body(state, network, size, timeout)


async def _body(
    state: h11.Connection, network: Any, size: int, read_timeout: float | None
) -> AsyncIterator[bytes]:
    """httpcore's ``_receive_response_body`` and ``_receive_event`` in one loop, yielding the
    body bytes of each read whole.

    h11 hands a chunked body over one ``Data`` per chunk, and an upstream writes one chunk per
    SSE event: a read that took in 20 events would be 20 items, each stepping the runner, the
    log and the subscribers on its own. Joined, it is one: at one event per upstream write, a
    gateway streaming at full speed reads many chunks at once, and its CPU per event went from
    13.5 to 9.0 µs (``bench/throughput_bench.py``, 1 event per write). Nothing waits for more:
    the bytes go as soon as h11 needs data again, and bytes read before an error come first.
    """
    next_event = state.next_event
    need_data = h11.NEED_DATA
    data = h11.Data
    pieces: list[Any] = []
    with map_httpcore_exceptions(), map_exceptions(_H11_ERRORS):
        while True:
            try:
                event = next_event()
            except h11.RemoteProtocolError:
                if pieces:
                    yield b"".join(pieces)
                raise
            if type(event) is data:
                pieces.append(event.data)
                continue
            if pieces:
                yield bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
                pieces.clear()
            if event is need_data:
                if not _between_chunks(state):
                    # The headers are in (h11 is past SEND_RESPONSE): an early EOF is fed to
                    # h11, whose body reader raises RemoteProtocolError for an incomplete body.
                    state.receive_data(await network.read(size, timeout=read_timeout))
                    continue
                # Plain chunks are decoded here until one is not (see chunked.py); its bytes
                # go to h11, which is still between the same two chunks.
                decoder = ChunkDecoder()
                while True:
                    raw = await network.read(size, timeout=read_timeout)
                    try:
                        body, rest = decoder.feed(raw) if raw else ([], decoder.end())
                    except ChunkFramingError as error:
                        if error.pieces:
                            yield b"".join(error.pieces)
                        raise h11.RemoteProtocolError(str(error)) from None
                    if body:
                        yield body[0] if len(body) == 1 else b"".join(body)
                    if rest is not None:
                        if rest:
                            state.receive_data(rest)
                        if not raw:
                            state.receive_data(b"")  # h11's EOF
                        break
            elif type(event) is h11.EndOfMessage or event is h11.PAUSED:
                return


def _between_chunks(state: h11.Connection) -> bool:
    """h11 reads a chunked body and stands between two chunks with nothing buffered: the next
    bytes start a chunk. (h11's private reader state, read defensively: any other shape is
    "no", and the body is h11's alone.)"""
    reader: Any = getattr(state, "_reader", None)
    if _CHUNKED_READER is None or type(reader) is not _CHUNKED_READER:
        return False
    buffered: Any = getattr(state, "_receive_buffer", None)
    return (
        getattr(reader, "_bytes_in_chunk", None) == 0
        and getattr(reader, "_bytes_to_discard", None) == b""
        and getattr(reader, "_reading_trailer", None) is False
        and buffered is not None
        and len(buffered) == 0
    )
