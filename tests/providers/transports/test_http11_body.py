"""The direct body read (``providers.transports.http11_body``) against a real server on
loopback: the bytes of each read (its chunks joined), the connection back in the pool after a
whole body, httpx's errors (cut short, silent), a closed connection after an early stop, and
httpx's own path for any response it does not know."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from httpcore._async.http11 import AsyncHTTP11Connection

from providers.transports.http11_body import direct_body
from providers.transports.pool import pooled_transport
from providers.transports.sse import SSETransport, body_reads
from tests.support import eventually

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedServer:
    """A hand-written HTTP/1.1 server: each request's body is written piece by piece as the
    test puts pieces on ``pieces`` (raw bytes, framing included); ``None`` ends the response
    (keep-alive), ``"close"`` closes the connection there."""

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self.connections = 0
        self.requests = 0
        self.closed_by_client = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                writer.write(HEAD)
                while (piece := await self.pieces.get()) is not None:
                    if piece == "close":
                        return
                    assert isinstance(piece, bytes)
                    writer.write(piece)
                    await writer.drain()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client += 1
        finally:
            writer.close()


@asynccontextmanager
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    state = ScriptedServer()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()


def client(read_timeout: float = 5.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=10, max_keepalive_connections=10)
    return httpx.AsyncClient(
        transport=pooled_transport(limits), timeout=httpx.Timeout(5.0, read=read_timeout)
    )


async def one_piece_in(response: httpx.Response) -> AsyncIterator[bytes]:
    """The direct body of ``response``, its first read (``data: one``) already checked."""
    body = direct_body(response)
    assert body is not None
    assert await anext(body) == b"data: one\n\n"
    return body


async def answered_on_a_new_connection(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    """The next request is answered, on a connection of its own (the last one was closed)."""
    await server.pieces.put(b"0\r\n\r\n")
    await server.pieces.put(None)
    response = await http.get(f"http://127.0.0.1:{server.port}/sse")
    assert response.status_code == 200
    assert server.connections == 2


async def test_each_read_is_one_item_with_the_bytes_sent_and_the_connection_is_reused() -> None:
    events = [b"data: one\n\n", b"data: two\n\ndata: three\n\n", b"data: " + b"x" * 3000 + b"\n\n"]
    async with scripted_server() as server, client() as http:
        for _ in range(2):
            url = f"http://127.0.0.1:{server.port}/sse"
            async with http.stream("POST", url) as response:
                body = direct_body(response)
                assert body is not None
                reads = []
                for event in events:
                    await server.pieces.put(chunk(event))
                    reads.append(await anext(body))
                await server.pieces.put(b"0\r\n\r\n")
                await server.pieces.put(None)
                assert [item async for item in body] == []
            assert reads == events
        assert server.requests == 2
        assert server.connections == 1  # the first connection went back to the pool


async def test_the_chunks_of_one_read_are_one_item() -> None:
    events = [b"data: %d\n\n" % i for i in range(20)]
    async with scripted_server() as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/sse"
        async with http.stream("POST", url) as response:
            body = direct_body(response)
            assert body is not None
            await server.pieces.put(b"".join(chunk(event) for event in events))  # one write
            assert await anext(body) == b"".join(events)
            await server.pieces.put(chunk(b"data: last\n\n") + b"0\r\n\r\n")
            await server.pieces.put(None)
            assert [item async for item in body] == [b"data: last\n\n"]


async def test_the_chunks_read_before_a_malformed_one_come_before_the_error() -> None:
    async with scripted_server() as server, client() as http:
        await server.pieces.put(chunk(b"data: one\n\n") + chunk(b"data: two\n\n") + b"zz\r\n")
        url = f"http://127.0.0.1:{server.port}/sse"
        async with http.stream("GET", url) as response:
            body = direct_body(response)
            assert body is not None
            assert await anext(body) == b"data: one\n\ndata: two\n\n"
            with pytest.raises(httpx.RemoteProtocolError):
                await anext(body)
        await server.pieces.put(None)
        await eventually(lambda: server.closed_by_client == 1)


async def test_the_same_bytes_as_httpx_own_body_read() -> None:
    pieces = [chunk(b"data: a\n\n") + chunk(b"data: b\n\n"), chunk(b"data: c\n\n") + b"0\r\n\r\n"]
    async with scripted_server() as server, client() as http:
        bodies = []
        for direct in (True, False):
            for piece in pieces:
                await server.pieces.put(piece)
            await server.pieces.put(None)
            url = f"http://127.0.0.1:{server.port}/sse"
            async with http.stream("GET", url) as response:
                body = direct_body(response) if direct else response.aiter_raw()
                assert body is not None
                bodies.append(b"".join([item async for item in body]))
        assert bodies[0] == bodies[1] == b"data: a\n\ndata: b\n\ndata: c\n\n"
        assert server.connections == 1


async def test_a_body_cut_short_is_httpx_remote_protocol_error_and_the_connection_closes() -> None:
    async with scripted_server() as server, client() as http:
        await server.pieces.put(chunk(b"data: one\n\n"))
        await server.pieces.put("close")  # no terminating chunk
        url = f"http://127.0.0.1:{server.port}/sse"
        async with http.stream("GET", url) as response:
            body = await one_piece_in(response)
            with pytest.raises(httpx.RemoteProtocolError):
                await anext(body)
        await answered_on_a_new_connection(server, http)


async def test_a_silent_body_is_httpx_read_timeout() -> None:
    async with scripted_server() as server, client(read_timeout=0.2) as http:
        await server.pieces.put(chunk(b"data: one\n\n"))
        url = f"http://127.0.0.1:{server.port}/sse"
        async with http.stream("GET", url) as response:
            body = await one_piece_in(response)
            with pytest.raises(httpx.ReadTimeout):
                await asyncio.wait_for(anext(body), 5)
        await server.pieces.put(None)  # the handler, done writing, finds the connection closed
        await eventually(lambda: server.closed_by_client == 1)


async def test_stopping_before_the_end_closes_the_connection() -> None:
    async with scripted_server() as server, client() as http:
        await server.pieces.put(chunk(b"data: one\n\n"))
        url = f"http://127.0.0.1:{server.port}/sse"
        async with http.stream("GET", url) as response:
            await one_piece_in(response)
        await server.pieces.put(None)  # the handler, done writing, finds the connection closed
        await eventually(lambda: server.closed_by_client == 1)
        await answered_on_a_new_connection(server, http)


async def test_a_content_length_body() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\ndata: x\n\n\n")
        await writer.drain()
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with client() as http, http.stream("GET", f"http://127.0.0.1:{port}/") as response:
            body = direct_body(response)
            assert body is not None
            assert b"".join([item async for item in body]) == b"data: x\n\n\n"
    finally:
        server.close()


async def test_responses_it_does_not_know_are_left_to_httpx() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"data: x\n\n")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        async with http.stream("GET", "http://upstream.test/") as response:
            assert direct_body(response) is None
            assert b"".join([item async for item in body_reads(response)]) == b"data: x\n\n"

    async with scripted_server() as server, client() as http:
        await server.pieces.put(b"0\r\n\r\n")
        await server.pieces.put(None)
        url = f"http://127.0.0.1:{server.port}/sse"
        seen: list[str] = []

        async def trace(name: str, info: dict[str, object]) -> None:
            seen.append(name)

        traced = {"trace": trace}
        async with http.stream("GET", url, extensions=traced) as response:
            assert direct_body(response) is None  # httpcore's trace hooks see every read
            await response.aread()
        assert "http11.receive_response_body.complete" in seen


async def test_a_connection_of_another_shape_is_left_to_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with scripted_server() as server, client() as http:
        await server.pieces.put(chunk(b"data: x\n\n") + b"0\r\n\r\n")
        await server.pieces.put(None)
        async with http.stream("GET", f"http://127.0.0.1:{server.port}/sse") as response:
            with monkeypatch.context() as patched:
                patched.delattr(AsyncHTTP11Connection, "READ_NUM_BYTES")
                assert direct_body(response) is None
            assert b"".join([item async for item in body_reads(response)]) == b"data: x\n\n"


async def test_the_sse_transport_client_reads_bodies_directly() -> None:
    transport = SSETransport()
    try:
        async with scripted_server() as server:
            await server.pieces.put(b"0\r\n\r\n")
            await server.pieces.put(None)
            http = transport._get_client()
            async with http.stream("GET", f"http://127.0.0.1:{server.port}/sse") as response:
                assert direct_body(response) is not None
    finally:
        await transport.aclose()
