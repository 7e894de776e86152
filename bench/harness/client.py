"""A lean HTTP/1.1 SSE reader on raw asyncio streams (uvloop), the same for every server.

The reader must cost far less than the servers it measures (500 subscribers on this machine),
so it does no per-event Python work beyond one regex pass per read: it counts ``data:`` lines,
extracts every ``t=<emit time>;`` the mock put into a delta and turns it into a delivery
latency at the moment the bytes were read.
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
    head = await reader.readuntil(b"\r\n\r\n")
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
    """Send one request and read its SSE body to the end (or to a run terminal event)."""
    result = StreamResult()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    try:
        result.started = time.perf_counter()
        writer.write(_request_bytes(method, path, body, headers))
        status, chunked, length = await _read_head(reader)
        result.status = status
        if status != 200:
            result.body_head = await _read_all(reader, chunked, length)
            result.ended = time.perf_counter()
            return result
        carry = b""
        latencies = result.latencies
        perf, wall = time.perf_counter, time.time
        while True:
            if chunked:
                line = await reader.readuntil(b"\r\n")
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    break
                data = (await reader.readexactly(size + 2))[:-2]
            else:
                data = await reader.read(1 << 16)
                if not data:
                    break
            now_wall = wall()
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n\n")
            if cut < 0:
                carry = buf
                continue
            complete, carry = buf[: cut + 2], buf[cut + 2 :]
            frames = complete.count(b"data: ")
            if frames and result.first_frame is None:
                result.first_frame = perf()
                if connected is not None:
                    connected.set()
            result.frames += frames
            if keep_latencies:
                emits = _EMIT.findall(complete)
                count = len(emits)
                if count:
                    latencies.extend([now_wall - float(t) for t in emits])
            else:  # counting only (fan-out subscribers that are not latency probes)
                count = complete.count(b"t=")
            if count:
                if result.first_delta is None:
                    result.first_delta = perf()
                result.deltas += count
            if stop_at_terminal and b'"type":"run.' in complete:
                match = _TERMINAL.search(complete)
                if match is not None:
                    result.terminal = match.group(1)
                    break
        result.ended = time.perf_counter()
        return result
    finally:
        writer.close()
