"""A lean HTTP/1.1 SSE reader on a raw asyncio protocol (uvloop), the same for every server.

The reader must cost far less than the servers it measures (500 subscribers on this machine),
so it does no per-event Python work beyond one regex pass per read: it counts ``data:`` lines,
extracts every ``t=<emit time>;`` the mock put into a delta and turns it into a delivery
latency at the moment the bytes were read. It reads in the transport's ``data_received``
callback: a stream reader cost one task wake-up and two awaited reads per chunk, as much CPU
as the gateway it measured at K = 500 (BENCHMARKS.md, "Costs behind the code's shortcuts").
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

__all__ = ["StreamResult", "read_stream", "request_json"]

_EMIT = re.compile(rb"t=(\d+\.\d+);")
_TERMINAL = re.compile(rb'"type":"run\.(completed|failed|cancelled)"')


@dataclass(slots=True)
class StreamResult:
    status: int = 0
    started: float = 0.0  # perf_counter when the request was sent
    first_frame: float | None = None  # perf_counter of the first complete frame
    first_delta: float | None = None  # perf_counter of the first frame with an emit time
    ended: float = 0.0
    frames: int = 0  # data: lines
    deltas: int = 0  # emit times seen
    latencies: list[float] = field(default_factory=list)  # seconds, per delta
    emits: list[float] = field(default_factory=list)  # wall-clock emit time, per delta
    terminal: bytes | None = None
    body_head: bytes = b""

    @property
    def elapsed(self) -> float:
        return self.ended - self.started


async def request_json(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """A small non-streaming request (abort, run start) on a fresh connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_request_bytes(method, path, body, headers))
        status, chunked, length = await _read_head(reader)
        payload = await _read_all(reader, chunked, length)
        return status, payload
    finally:
        writer.close()


def _request_bytes(method: str, path: str, body: bytes, headers: dict[str, str] | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", "connection: close"]
    if body or method == "POST":
        lines += ["content-type: application/json", f"content-length: {len(body)}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, bool, int | None]:
    return _parse_head(await reader.readuntil(b"\r\n\r\n"))


async def _read_all(reader: asyncio.StreamReader, chunked: bool, length: int | None) -> bytes:
    if length is not None:
        return await reader.readexactly(length)
    if not chunked:
        return await reader.read()
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return b"".join(parts)
        parts.append(data[:-2])


class _Body:
    """Counts the SSE body of one response as its bytes arrive (chunked, sized or to EOF)."""

    __slots__ = ("_carry", "_left", "_raw", "_skip", "chunked", "ended", "keep_latencies", "result")

    def __init__(self, result: StreamResult, chunked: bool, keep_latencies: bool) -> None:
        self.result = result
        self.chunked = chunked
        self.keep_latencies = keep_latencies
        self.ended = False  # the chunked body's last chunk was read
        self._carry = b""  # the start of an incomplete SSE frame
        self._raw = b""  # an incomplete chunk-size line
        self._left = 0  # bytes left in the current chunk
        self._skip = 0  # bytes of the CRLF after a chunk still to skip

    def _dechunk(self, data: bytes) -> bytes:
        buf = self._raw + data if self._raw else data
        self._raw = b""
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while pos < end:
            if self._left:
                take = min(self._left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._skip = 2
            elif self._skip:
                take = min(self._skip, end - pos)
                pos += take
                self._skip -= take
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self._raw = buf[pos:]
                    break
                size = int(buf[pos:eol].split(b";")[0], 16)
                pos = eol + 2
                if size == 0:
                    self.ended = True
                    break
                self._left = size
        return out[0] if len(out) == 1 else b"".join(out)

    def feed(self, data: bytes, now_wall: float, perf: float) -> bool:
        """Count ``data`` (read at ``now_wall``); True once a run terminal was read."""
        if self.chunked:
            data = self._dechunk(data)
        result = self.result
        buf = self._carry + data if self._carry else data
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self._carry = buf
            return False
        complete, self._carry = buf[: cut + 2], buf[cut + 2 :]
        frames = complete.count(b"data: ")
        if frames and result.first_frame is None:
            result.first_frame = perf
        result.frames += frames
        if self.keep_latencies:
            emits = _EMIT.findall(complete)
            count = len(emits)
            if count:
                times = [float(t) for t in emits]
                result.emits.extend(times)
                result.latencies.extend([now_wall - t for t in times])
        else:  # counting only (fan-out subscribers that are not latency probes)
            count = complete.count(b"t=")
        if count:
            if result.first_delta is None:
                result.first_delta = perf
            result.deltas += count
        if b'"type":"run.' in complete:
            match = _TERMINAL.search(complete)
            if match is not None:
                result.terminal = match.group(1)
                return True
        return False


class _StreamProtocol(asyncio.Protocol):
    """Reads one response on the event loop's callback: no stream reader, no task switch per
    read (with 500 subscribers the client must cost far less than the server it measures)."""

    def __init__(
        self,
        result: StreamResult,
        *,
        stop_at_terminal: bool,
        connected: asyncio.Event | None,
        keep_latencies: bool,
        done: asyncio.Future[None],
    ) -> None:
        self.result = result
        self.stop_at_terminal = stop_at_terminal
        self.connected = connected
        self.keep_latencies = keep_latencies
        self.done = done
        self._head = b""
        self._body: _Body | None = None
        self._error_body: list[bytes] | None = None
        self._length: int | None = None

    def _finish(self) -> None:
        if not self.done.done():
            self.result.ended = time.perf_counter()
            if self._error_body is not None:
                self.result.body_head = b"".join(self._error_body)
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        now_wall = time.time()
        if self._body is None and self._error_body is None:
            self._head += data
            cut = self._head.find(b"\r\n\r\n")
            if cut < 0:
                return
            status, chunked, self._length = _parse_head(self._head[: cut + 4])
            data = self._head[cut + 4 :]
            self._head = b""
            self.result.status = status
            self._body = _Body(self.result, chunked, self.keep_latencies)
            if status != 200:
                self._error_body = []
        body = self._body
        assert body is not None
        if self._error_body is not None:
            self._error_body.append(body._dechunk(data) if body.chunked else data)
            if body.ended or (
                self._length is not None and sum(map(len, self._error_body)) >= self._length
            ):
                self._finish()
            return
        if not data:
            return
        first = self.result.first_frame is None
        stop = body.feed(data, now_wall, time.perf_counter())
        if first and self.result.first_frame is not None and self.connected is not None:
            self.connected.set()
        if (stop and self.stop_at_terminal) or body.ended:
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()


def _parse_head(head: bytes) -> tuple[int, bool, int | None]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    chunked, length = False, None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "content-length":
            length = int(value.strip())
    return status, chunked, length


async def read_stream(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    headers: dict[str, str] | None = None,
    stop_at_terminal: bool = True,
    connected: asyncio.Event | None = None,
    keep_latencies: bool = True,
) -> StreamResult:
    """Send one request and read its SSE body to the end (or to a run terminal event).

    Latency is the time a delta's bytes reached this process minus its emit time.
    """
    result = StreamResult()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.create_connection(
        lambda: _StreamProtocol(
            result,
            stop_at_terminal=stop_at_terminal,
            connected=connected,
            keep_latencies=keep_latencies,
            done=done,
        ),
        "127.0.0.1",
        port,
    )
    try:
        result.started = time.perf_counter()
        transport.write(_request_bytes(method, path, body, headers))
        await done
        return result
    finally:
        transport.close()
