"""The idle check of the upstream connections (``providers/compat/asyncio_fast.py``), against a
real HTTP/1.1 server on loopback: an idle connection with bytes nobody asked for is not reused,
a quiet one is; without the StreamReader's buffer to read (an interpreter whose asyncio differs),
one warning, and no idle connection is reused — every request still gets its answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from providers.compat.asyncio_fast import ASYNCIO, buffered
from providers.transports.pool import pooled_transport
from tests.support import eventually


class Server:
    """``/hello`` answers ``hello`` and keeps the connection; ``/chatty`` answers, then, once
    ``speak`` is set (the answer was read), writes bytes nobody asked for on the idle
    connection."""

    def __init__(self) -> None:
        self.connections = 0
        self.speak = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                await writer.drain()
                if head.split(b" ", 2)[1] == b"/chatty":
                    await self.speak.wait()
                    writer.write(b"unasked")
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def serve() -> AsyncIterator[Server]:
    state = Server()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()


@pytest.fixture
def checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs again at the next use (restored after)."""
    monkeypatch.setattr(ASYNCIO, "_checked", False)
    monkeypatch.setattr(ASYNCIO, "_internals", None)


def client() -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    return httpx.AsyncClient(transport=pooled_transport(limits), timeout=5.0)


async def two_requests(server: Server, first: str) -> tuple[list[str], Any]:
    """``first`` then ``/hello`` on one client; the answers and the first one's stream."""
    async with client() as http:
        response = await http.get(f"http://127.0.0.1:{server.port}{first}")
        stream = response.extensions["network_stream"]
        if first == "/chatty":
            server.speak.set()
            await eventually(lambda: stream.get_extra_info("is_readable") is True)
        again = await http.get(f"http://127.0.0.1:{server.port}/hello")
        return [response.text, again.text], stream


async def test_a_quiet_idle_connection_is_reused(checked_again: None) -> None:
    async with serve() as server:
        answers, _ = await two_requests(server, "/hello")
    assert answers == ["hello", "hello"]
    assert server.connections == 1
    assert ASYNCIO.internals() is True


async def test_the_buffer_is_read_as_it_is() -> None:
    reader = asyncio.StreamReader()
    assert buffered(reader) is False
    reader.feed_data(b"x")
    assert buffered(reader) is True
    assert await reader.read(1) == b"x"
    assert buffered(reader) is False


async def test_an_idle_connection_holding_unasked_bytes_is_not_reused(
    checked_again: None,
) -> None:
    async with serve() as server:
        answers, _ = await two_requests(server, "/chatty")
    assert answers == ["hello", "hello"]
    assert server.connections == 2


async def test_without_the_buffer_one_warning_and_no_idle_connection_is_reused(
    checked_again: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = asyncio.StreamReader.__init__

    def reshaped(self: asyncio.StreamReader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.StreamReader, "__init__", reshaped)
    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        async with serve() as server:
            answers, _ = await two_requests(server, "/hello")
            answers += (await two_requests(server, "/hello"))[0]
    assert answers == ["hello"] * 4
    assert server.connections == 4  # each idle connection counted as readable: a new one
    warnings = [r.getMessage() for r in caplog.records if r.name == "providers.compat"]
    assert len(warnings) == 1 and warnings[0].startswith("asyncio's internals differ"), warnings
    assert "reshaped no longer sets self._buffer" in warnings[0]
    assert ASYNCIO.internals() is None
