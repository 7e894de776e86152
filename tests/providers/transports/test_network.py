"""The upstream network backend (asyncio streams, one timer per wait): what httpcore's own
backend does, against a real server on loopback: keep-alive reuse, a connection the server
closed is not reused, read timeouts, cancellation, connect errors, TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpcore
import httpx
import pytest

from providers.transports.network import AsyncioBackend, AsyncioStream, wait_within
from providers.transports.pool import pooled_transport
from tests.support import eventually


class RawServer:
    """An HTTP/1.1 server written by hand: ``/hello`` (keep-alive), ``/once`` (answers, then
    closes the connection without saying so), ``/stall`` (headers, then nothing)."""

    def __init__(self) -> None:
        self.connections = 0
        self.closed_by_client = 0
        self.closed = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path == b"/stall":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    if not await reader.read(1):
                        self.closed_by_client += 1
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                await writer.drain()
                if path == b"/once":
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()
            self.closed.set()


@asynccontextmanager
async def raw_server(context: ssl.SSLContext | None = None) -> AsyncIterator[RawServer]:
    state = RawServer()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0, ssl=context)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()


def client() -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=10, max_keepalive_connections=10)
    return httpx.AsyncClient(transport=pooled_transport(limits), timeout=5.0)


def test_the_pooled_transport_connects_through_the_asyncio_backend() -> None:
    transport = pooled_transport(httpx.Limits())
    assert isinstance(transport._pool._network_backend, AsyncioBackend)


async def test_keep_alive_connections_are_reused() -> None:
    async with raw_server() as server, client() as http:
        for _ in range(3):
            response = await http.get(f"http://127.0.0.1:{server.port}/hello")
            assert response.text == "hello"
        assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async with raw_server() as server, client() as http:
        response = await http.get(f"http://127.0.0.1:{server.port}/once")
        assert response.text == "hello"
        stream = response.extensions["network_stream"]
        await asyncio.wait_for(server.closed.wait(), 5)
        await eventually(lambda: stream.get_extra_info("is_readable") is True)
        response = await http.get(f"http://127.0.0.1:{server.port}/hello")
        assert response.text == "hello"
        assert server.connections == 2


async def test_a_silent_upstream_times_the_read_out_and_the_connection_is_closed() -> None:
    async with raw_server() as server, client() as http:
        url = f"http://127.0.0.1:{server.port}/stall"
        async with http.stream("GET", url, timeout=httpx.Timeout(5.0, read=0.2)) as response:
            assert response.status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                await asyncio.wait_for(response.aread(), 5)
        await eventually(lambda: server.closed_by_client == 1)


async def test_a_cancelled_read_is_a_cancellation_not_a_timeout() -> None:
    async with raw_server() as server, client() as http:
        started = asyncio.Event()

        async def read() -> None:
            url = f"http://127.0.0.1:{server.port}/stall"
            async with http.stream("GET", url, timeout=httpx.Timeout(5.0, read=30)) as response:
                started.set()
                await response.aread()

        task = asyncio.create_task(read())
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: server.closed_by_client == 1)


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with raw_server() as server:
        port = server.port
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"http://127.0.0.1:{port}/hello")


async def test_the_timer_raises_the_given_error_and_lets_other_cancellations_through() -> None:
    with pytest.raises(httpcore.ConnectTimeout):
        await asyncio.wait_for(wait_within(asyncio.sleep(30), 0.05, httpcore.ConnectTimeout), 5)
    assert await wait_within(asyncio.sleep(0, "done"), 5, httpcore.ReadTimeout) == "done"
    waiting = asyncio.create_task(wait_within(asyncio.sleep(30), 10, httpcore.ReadTimeout))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


class _Writer:
    """What ``AsyncioStream`` asks of a writer when it only reads and closes."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _stream() -> tuple[asyncio.StreamReader, AsyncioStream]:
    reader = asyncio.StreamReader()
    return reader, AsyncioStream(reader, _Writer())  # type: ignore[arg-type]


async def test_reads_that_keep_coming_never_time_out_however_long_the_stream() -> None:
    """Each read gets its own ``timeout``: one timer per stream, its deadline moved by each
    read, never fires on a stream whose reads each come in time."""
    reader, stream = _stream()
    loop = asyncio.get_running_loop()
    got = []
    for n in range(12):  # 12 reads, 0.05 s apart: 0.6 s in all, with a 0.2 s read timeout
        loop.call_later(0.05, reader.feed_data, b"%d" % n)
        got.append(await asyncio.wait_for(stream.read(100, timeout=0.2), 5))
    assert got == [b"%d" % n for n in range(12)]
    await stream.aclose()


@pytest.mark.parametrize("first_timeout", [0.1, 300], ids=["same", "longer before"])
async def test_a_read_that_waits_past_its_timeout_is_a_read_timeout(first_timeout: float) -> None:
    """Bounded by its own timeout, not the read before's: the timer set for a longer one is
    moved up."""
    reader, stream = _stream()
    reader.feed_data(b"first")
    assert await stream.read(100, timeout=first_timeout) == b"first"
    started = asyncio.get_running_loop().time()
    with pytest.raises(httpcore.ReadTimeout):
        await asyncio.wait_for(stream.read(100, timeout=0.1), 5)
    assert 0.09 <= asyncio.get_running_loop().time() - started < 5
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await stream.aclose()


async def test_idle_time_between_reads_cancels_nothing() -> None:
    """The timer outlives the read; firing while no read is in progress, it lapses."""
    reader, stream = _stream()
    reader.feed_data(b"a")
    assert await stream.read(100, timeout=0.05) == b"a"
    idle = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, idle.set)  # four read timeouts of idleness
    await asyncio.wait_for(idle.wait(), 5)  # this task is not cancelled meanwhile
    assert stream._watchdog is not None and stream._watchdog._handle is None
    reader.feed_data(b"b")
    assert await stream.read(100, timeout=0.05) == b"b"


async def test_an_outside_cancellation_of_a_timed_read_stays_a_cancellation() -> None:
    reader, stream = _stream()
    task = asyncio.create_task(stream.read(100, timeout=30))
    await eventually(lambda: stream._watchdog is not None and stream._watchdog._task is task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    reader.feed_data(b"after")  # the stream still reads
    assert await stream.read(100, timeout=30) == b"after"


async def test_closing_the_stream_cancels_its_timer() -> None:
    reader, stream = _stream()
    reader.feed_data(b"x")
    await stream.read(100, timeout=300)
    watchdog = stream._watchdog
    assert watchdog is not None and watchdog._handle is not None
    handle = watchdog._handle
    await stream.aclose()
    assert watchdog._handle is None and handle.cancelled()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the openssl command line, nothing fetched)."""
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


async def test_tls_connections_are_verified_and_reused(certificate: tuple[Path, Path]) -> None:
    key, cert = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with raw_server(server_context) as server:
        url = f"https://127.0.0.1:{server.port}/hello"
        async with httpcore.AsyncConnectionPool(
            ssl_context=trusting, network_backend=AsyncioBackend()
        ) as pool:
            for _ in range(2):
                response = await pool.request("GET", url)
                assert response.content == b"hello"
                stream = response.extensions["network_stream"]
                assert stream.get_extra_info("ssl_object") is not None
            assert server.connections == 1
        async with httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(), network_backend=AsyncioBackend()
        ) as pool:
            with pytest.raises(httpcore.ConnectError):
                await pool.request("GET", url)  # not trusted: refused, not a hang
