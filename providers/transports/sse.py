"""SSE transport: ``POST`` JSON with the configured headers, yield ``ServerSentEvent`` chunks.

Timeouts: ``timeout_seconds`` bounds the connect and the whole request, the wait for a free pooled
connection included; ``idle_timeout_seconds`` bounds the silence between two reads
(``upstream_idle_timeout``). The transport's client (shared by every run of its provider) keeps
at most ``max_connections`` upstream connections: a run that finds none free within
``timeout_seconds`` fails with ``upstream_timeout``, it never waits silently. A non-2xx answer
raises :class:`UpstreamHTTPError` (status, body excerpt, retryable for 429/5xx). On abort the
socket is shut down from the signal callback, so a read blocked on a silent upstream wakes up at
once and the upstream sees the disconnect immediately; the response is then closed.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any

import httpx
from httpx_sse import ServerSentEvent

from providers.compat import check_fast_paths
from providers.errors import (
    UpstreamEventTooLarge,
    UpstreamHTTPError,
    UpstreamMalformedChunk,
    body_excerpt,
    map_transport_errors,
)
from providers.signal import AbortSignal
from providers.transports._abort import Stopper, race_stop
from providers.transports.cookies import CookielessClient
from providers.transports.http11_body import direct_body
from providers.transports.pool import pooled_transport
from providers.transports.request import UpstreamRequest

__all__ = ["DEFAULT_MAX_CONNECTIONS", "SSEParser", "SSETransport", "upstream_url"]

#: Default pool size of a provider's client: one connection per concurrently streaming run, so a
#: production gateway (>= 1,000 concurrent runs) never queues a run behind the pool.
DEFAULT_MAX_CONNECTIONS = 1000

_ERROR_BODY_BYTES = 4096


class SSEParser:
    """Incremental SSE parser over text pieces, bounded by ``max_event_bytes``.

    The event-stream interpretation of the HTML spec, exactly as httpx-sse's ``SSELineDecoder`` +
    ``SSEDecoder`` apply it (the tests hold it to them), in one pass per piece: one ``split`` per
    piece and a short path for ``data:`` lines, instead of a decoder call per line.
    """

    __slots__ = (
        "_data",
        "_event",
        "_id",
        "_max",
        "_pending",
        "_retry",
        "_size",
        "_strict",
        "_trailing_cr",
        "parsed_before_error",
    )

    def __init__(self, max_event_bytes: int, *, strict_fields: bool = False) -> None:
        self._max = max_event_bytes
        self._size = 0  # characters in the lines of the event being read
        #: raise on a line whose field is not data/event/id/retry (the SSE spec ignores it)
        self._strict = strict_fields
        self._pending = ""  # the piece's last, unterminated line
        self._trailing_cr = False  # a piece ended in "\r": maybe half of "\r\n"
        self._event = ""
        self._data: list[str] = []
        self._id = ""  # the last event id: kept across events, as the spec says
        self._retry: int | None = None
        #: When ``feed`` or ``close`` raises: the events the same call completed before the
        #: offending line (a read holds several events; they came first, so they go first).
        self.parsed_before_error: list[ServerSentEvent] = []

    def feed(self, text: str) -> list[ServerSentEvent]:
        if self._trailing_cr:
            text = "\r" + text
            self._trailing_cr = False
        if text.endswith("\r"):
            self._trailing_cr = True
            text = text[:-1]
        if not text:
            return []
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        elif not (self._pending or self._data or self._size) and text.endswith("\n\n"):
            events = self._frames(text)
            if events is not None:
                return events
        lines = text.split("\n")
        if self._pending:
            lines[0] = self._pending + lines[0]
        self._pending = lines.pop()
        out: list[ServerSentEvent] = []
        if lines:
            self._lines(lines, out)
        if len(self._pending) > self._max:
            self.parsed_before_error = out
            raise UpstreamEventTooLarge(self._max)
        return out

    def _frames(self, text: str) -> list[ServerSentEvent] | None:
        """The events of ``text`` when it is whole ``data: …`` frames (one line each, ended by a
        blank line: what an OpenAI-compatible server writes), else None (parse it by lines).

        Called between events only (no partial line, no line of an unfinished event read): each
        frame is then one event, exactly as the line loop would read it, without its two loop
        turns per event.
        """
        frames = text.split("\n\n")
        frames.pop()  # the "" after the last blank line
        # Every "\n" is in a separator: no frame has a second line (nor an empty one).
        if text.count("\n") != 2 * len(frames):
            return None
        limit, event, last_id, retry = self._max, self._event, self._id, self._retry
        if event or retry is not None:
            return None  # an event/retry field pending from a previous piece: the line loop
        out: list[ServerSentEvent] = []
        for frame in frames:
            if not frame.startswith("data: ") or len(frame) > limit:
                return None  # nothing consumed yet: the line loop starts over
            # Positional: the keyword call costs more (BENCHMARKS.md, "Costs behind the code's
            # shortcuts").
            out.append(ServerSentEvent("", frame[6:], last_id, None))
        self._size = 0
        return out

    def close(self) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        lines = [self._pending] if self._pending or self._trailing_cr else []
        self._pending = ""
        self._trailing_cr = False
        lines.append("")
        self._lines(lines, out)
        return out

    def _lines(self, lines: list[str], out: list[ServerSentEvent]) -> None:
        size, limit, strict, data = self._size, self._max, self._strict, self._data
        for line in lines:
            if not line:
                size = 0
                if data or self._event or self._id or self._retry is not None:
                    # Positional: the keyword call costs more.
                    out.append(ServerSentEvent(self._event, "\n".join(data), self._id, self._retry))
                    data = self._data = []
                    self._event = ""
                    self._retry = None
                continue
            size += len(line)
            if size > limit:
                self.parsed_before_error = out
                raise UpstreamEventTooLarge(limit)
            if line.startswith("data: "):
                data.append(line[6:])
                continue
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id":
                if "\0" not in value:
                    self._id = value
            elif field == "retry":
                try:
                    self._retry = int(value)
                except ValueError:
                    pass
            elif strict:
                self.parsed_before_error = out
                raise UpstreamMalformedChunk(
                    "An SSE line has no known field (data, event, id, retry)."
                )
        self._size = size


@functools.lru_cache(maxsize=256)
def upstream_url(url: str) -> httpx.URL:
    """``url`` parsed, once: a provider calls the same few URLs, and httpx parses a ``str`` URL
    at every request, a visible part of a run start's CPU before the upstream call. An
    ``httpx.URL`` is immutable, so one can be shared; an invalid URL raises here, every time,
    as ``build_request`` did."""
    return httpx.URL(url)


class SSETransport:
    kind = "sse"

    def __init__(
        self,
        *,
        timeout_seconds: float | None = 60.0,
        idle_timeout_seconds: float | None = 60.0,
        client: httpx.AsyncClient | None = None,
        strict_fields: bool = False,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        fast_paths: bool = True,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1.")
        self.strict_fields = strict_fields
        self.timeout_seconds = timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self.max_connections = max_connections
        #: Read through the compat modules' fast paths (``providers/compat/``), each where its
        #: internals match; False: httpx's public API only (``[gateway] fast_paths``).
        self.fast_paths = fast_paths
        if fast_paths:
            check_fast_paths()
        self._client = client
        self._owns_client = client is None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(
                connect=self.timeout_seconds,
                read=self.idle_timeout_seconds,
                write=self.timeout_seconds,
                pool=self.timeout_seconds,
            )
            # Idle connections are kept (up to the pool size) so a burst of runs reuses them
            # instead of reconnecting, for 4 s: uvicorn's and Node's servers close an idle
            # connection after 5 s, and a connection reused just as its server closes it fails
            # the run `upstream_dropped` (httpx's default expiry is those same 5 s; the soak saw
            # 3-4 such runs per 10 minutes).
            limits = httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
                keepalive_expiry=4.0,
            )
            transport = pooled_transport(limits, fast_paths=self.fast_paths)
            self._client = CookielessClient(timeout=timeout, limits=limits, transport=transport)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    async def open(
        self, request: UpstreamRequest, signal: AbortSignal
    ) -> AsyncIterator[ServerSentEvent]:
        batches = self.open_batches(request, signal)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()  # at once: it closes the upstream response

    async def open_batches(
        self, request: UpstreamRequest, signal: AbortSignal
    ) -> AsyncGenerator[list[ServerSentEvent], None]:
        """Like :meth:`open`, the events of one read as one non-empty list (the runner then
        steps this generator once per read, not once per event)."""
        stopper = Stopper(signal, self.timeout_seconds)
        try:
            stopper.check()
            client = self._get_client()
            headers = {"accept": "text/event-stream", **request.headers}
            with map_transport_errors(signal):
                http_request = client.build_request(
                    request.method, upstream_url(request.url), json=request.json, headers=headers
                )
                response = await race_stop(client.send(http_request, stream=True), stopper)
            try:
                stopper.on_stop(lambda: _close_now(response))
                with map_transport_errors(signal):
                    if not 200 <= response.status_code < 300:
                        excerpt = await _excerpt(response, request.headers.values())
                        raise UpstreamHTTPError(response.status_code, excerpt)
                    parser = SSEParser(request.max_event_bytes, strict_fields=self.strict_fields)
                    # What response.aiter_text() does (the same decoder), one async generator
                    # layer less per read (BENCHMARKS.md, "Costs behind the code's shortcuts").
                    decoder = codecs.getincrementaldecoder(response.encoding or "utf-8")
                    decode = decoder(errors="replace").decode
                    try:
                        async for raw in body_reads(response, fast_paths=self.fast_paths):
                            text = decode(raw)
                            if text:
                                stopper.check()
                                events = parser.feed(text)
                                if events:
                                    yield events
                        text = decode(b"", True)
                        if text:
                            stopper.check()
                            events = parser.feed(text)
                            if events:
                                yield events
                        stopper.check()
                        events = parser.close()
                        if events:
                            yield events
                    except (UpstreamEventTooLarge, UpstreamMalformedChunk):
                        if parser.parsed_before_error:
                            yield parser.parsed_before_error
                        raise
            except Exception:
                if stopper.stopped:
                    raise stopper.error() from None
                raise
            finally:
                await response.aclose()
                # httpx binds the stream to its response, each referring to the other: once
                # closed, unbind it, so the response and its connection's objects die by
                # reference count with the run instead of waiting for a full collection.
                response.stream = _CLOSED_STREAM
        finally:
            stopper.close()


_CLOSED_STREAM = httpx.ByteStream(b"")


def body_reads(response: httpx.Response, *, fast_paths: bool = True) -> AsyncIterator[bytes]:
    """The body of a streamed response, one item per read.

    Not content-encoded (an event stream nearly never is), ``aiter_bytes()`` and the
    ``aiter_raw()`` under it only pass each read on: iterate the response's own byte stream
    (public: ``response.stream``), two async-generator layers fewer for every suspended read to
    unwind and resume. With ``fast_paths``, over httpcore's HTTP/1.1 connection, the body is
    read off the connection itself (:func:`~providers.transports.http11_body.direct_body`:
    five layers fewer again). Otherwise ``aiter_bytes()`` decodes.
    """
    stream = response.stream
    if (
        "content-encoding" in response.headers
        or response.is_stream_consumed
        or response.is_closed
        or not isinstance(stream, httpx.AsyncByteStream)
    ):
        return response.aiter_bytes()
    response.is_stream_consumed = True  # as aiter_raw() marks it
    direct = direct_body(response) if fast_paths else None
    return stream.__aiter__() if direct is None else direct


def _close_now(response: httpx.Response) -> None:
    """Tear the connection down synchronously: the upstream sees the disconnect at once and a
    read blocked on it returns immediately."""
    stream: Any = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None and shutdown_socket(sock):
        return
    asyncio.ensure_future(response.aclose())  # noqa: RUF006 - best effort for in-memory transports


def shutdown_socket(sock: Any) -> bool:
    """``shutdown(SHUT_RDWR)`` on a socket, or on the socket behind a loop's pseudo-socket
    (uvloop hands out objects without ``shutdown``: a duplicate of its descriptor is used;
    shutting one descriptor down shuts the connection down for all)."""
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
            return True
        except OSError:
            return False
    try:
        fd = int(sock.fileno())
    except Exception:
        return False
    if fd < 0:
        return False
    try:
        duplicate = socket.socket(fileno=os.dup(fd))
    except OSError:
        return False
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        duplicate.close()


async def _excerpt(response: httpx.Response, secrets: Iterable[str]) -> str:
    raw = b""
    async for piece in response.aiter_bytes():
        raw += piece
        if len(raw) >= _ERROR_BODY_BYTES:
            break
    return body_excerpt(raw, secrets)
