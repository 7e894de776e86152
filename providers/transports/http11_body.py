"""A streamed HTTP/1.1 body read straight off httpcore's connection, one loop for every read.

Through httpx, each read of a streamed body resumes five nested async generators (httpx's
bound and response streams, httpcore's pool stream, connection stream and body reader), a
coroutine, and two ``contextlib`` context managers that map exceptions. An upstream that
streams one delta per read pays all of that per delta. :func:`direct_body` runs the loop of
httpcore's ``_receive_response_body`` itself, over the same h11 state and network stream,
with the exceptions mapped once for the whole body (the figures: ``BENCHMARKS.md``, "Private
internals: fast paths on and off").

Inside a chunked body, the plain chunks are decoded by :mod:`providers.transports.chunked`
instead of h11; h11 reads every other chunk, from the boundary where it stands, and the end of
the message.

Everything else stays httpcore's: the request, the headers and the close. At the end of the
body h11 is ``DONE`` and ``response.aclose()`` hands the connection back to the pool; after
an error or an early stop, h11 is not done and ``aclose()`` closes the connection. Errors are
httpx's, as through ``aiter_raw()``. The internals it needs come from
:mod:`providers.compat.httpx_fast`, :mod:`providers.compat.httpcore_fast` and
:mod:`providers.compat.h11_fast`; any other shape of response (another transport, HTTP/2, a
``trace`` extension, internals that do not match) is left to httpx: :func:`direct_body`
returns ``None``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import h11
import httpcore
import httpx

from providers.compat.h11_fast import H11, between_chunks
from providers.compat.httpcore_fast import http11_parts
from providers.compat.httpx_fast import httpcore_stream
from providers.transports.chunked import ChunkDecoder, ChunkFramingError

__all__ = ["direct_body", "httpx_errors"]

#: httpcore's exceptions and httpx's of the same name, the most specific first (what httpx's
#: transport maps them to).
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[Exception]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (h11.RemoteProtocolError, httpx.RemoteProtocolError),
)


@contextmanager
def httpx_errors() -> Iterator[None]:
    """httpcore's (and h11's) exceptions raised inside as httpx's, as httpx's transport maps
    them."""
    try:
        yield
    except Exception as error:
        for source, target in _HTTPX_ERRORS:
            if isinstance(error, source):
                raise target(str(error)) from error
        raise


def direct_body(response: httpx.Response) -> AsyncIterator[bytes] | None:
    """The body of ``response`` (streamed, not yet read), one item per network read that
    carried body bytes (its chunks joined); ``None`` when it is not httpx over httpcore's
    HTTP/1.1 connection (or their internals do not match)."""
    parts = http11_parts(httpcore_stream(response))
    if parts is None:
        return None
    return _body(*parts)


async def _body(
    state: h11.Connection, network: Any, size: int, read_timeout: float | None
) -> AsyncIterator[bytes]:
    """httpcore's ``_receive_response_body`` and ``_receive_event`` in one loop, yielding the
    body bytes of each read whole.

    h11 hands a chunked body over one ``Data`` per chunk, and an upstream writes one chunk per
    SSE event: a read that took in 20 events would be 20 items, each stepping the runner, the
    log and the subscribers on its own. Joined, it is one: at one event per upstream write, a
    gateway streaming at full speed reads many chunks at once. Nothing waits for more:
    the bytes go as soon as h11 needs data again, and bytes read before an error come first.
    """
    next_event = state.next_event
    chunked_reader = H11.internals()
    need_data = h11.NEED_DATA
    data = h11.Data
    pieces: list[Any] = []
    with httpx_errors():
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
                if not between_chunks(state, chunked_reader):
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
