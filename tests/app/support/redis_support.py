"""Shared helpers for the Redis backend tests: a client on the shared Redis with a per-test key
prefix (cleaned up afterwards), and a private ``redis-server`` for tests that stop or restart it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pytest
import uvicorn
from pydantic import TypeAdapter
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.loopback_asgi import serve_asgi
from tests.support import free_port

PoolT = TypeVar("PoolT", bound=ConnectionPool)

SHARED_REDIS_URL = os.environ.get("AGW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

#: ``[gateway] fast_paths`` for the test gateways, from the same environment variable as the
#: gateway's own settings (``make pytest`` runs some tests again with it false).
FAST_PATHS: bool = TypeAdapter(bool).validate_python(
    os.environ.get("AGENT_GATEWAY_GATEWAY__FAST_PATHS", "true")
)


def gateway_redis_client(url: str) -> Redis:
    """The client a test gateway's Redis backend uses: the app's, with :data:`FAST_PATHS`."""
    from app.backends.redis import redis_client  # the app's, imported by the tests using it

    return redis_client(url, fast_paths=FAST_PATHS)


def unique_prefix() -> str:
    return f"agwtest-{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def shared_redis(prefix: str) -> AsyncIterator[Redis]:
    # Generous: under load 50 connections opened at once (claim races) take a while.
    client = Redis.from_url(SHARED_REDIS_URL, socket_timeout=10, socket_connect_timeout=10)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture
async def prefix() -> str:
    """A key prefix of this test's own on the shared Redis (import with ``redis``)."""
    return unique_prefix()


@pytest.fixture
async def redis(prefix: str) -> AsyncIterator[Redis]:
    """A client of the shared Redis; the test's ``prefix`` keys are deleted afterwards."""
    async with shared_redis(prefix) as client:
        yield client


@pytest.fixture
async def clients(prefix: str) -> AsyncIterator[tuple[Redis, Redis, str]]:
    """The gateway's client, redis-py's stock client on the same protocol (RESP2), and a key
    prefix of the test's own (its keys deleted afterwards); import with ``prefix``."""
    from app.backends.redis import redis_client  # the app's, imported by the tests using it

    lean = redis_client(SHARED_REDIS_URL)
    stock = Redis.from_url(SHARED_REDIS_URL, protocol=2)
    try:
        yield lean, stock, prefix
    finally:
        keys = [key async for key in stock.scan_iter(f"{prefix}*")]
        if keys:
            await stock.delete(*keys)
        await lean.aclose()
        await stock.aclose()


class PrivateRedis:
    """A ``redis-server`` of our own on a free port, in a temp dir of its own, restartable.

    Persistence as deployed (``docker-compose.yml``): an append-only file fsynced every second
    (``appendfsync``: ``everysec``, or ``always``; ``appendonly=False`` for a test about
    persistence being off), plus the RDB saved on a graceful stop. A restart keeps the port and
    the dir, so it loads what the last run persisted (the AOF when on).
    """

    def __init__(self, *, appendonly: bool = True, appendfsync: str = "everysec") -> None:
        assert appendfsync in ("always", "everysec", "no"), appendfsync
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agw-redis-"))
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe is not None, "redis-server is not installed"
        self.proc = subprocess.Popen(
            [
                exe,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.dir),
                "--save", "3600 1",
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync,
                "--daemonize", "no",
                "--logfile", str(self.dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"redis-server exited:\n{self.log()}"
            if self._answers():
                return
            time.sleep(0.05)
        raise RuntimeError(f"private redis-server did not start:\n{self.log()}")

    def _answers(self) -> bool:
        """PING answers PONG (not ``-LOADING``: the AOF or RDB is loaded)."""
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
        ):
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        """Graceful stop: SIGTERM makes redis save its RDB, so data survives a restart."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def crash(self) -> None:
        """``kill -9``: no save, no AOF rewrite; a restart loads what the AOF holds."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def aof_tail(self) -> Path:
        """The AOF file appended to now (Redis 7: the manifest's last ``incr`` file)."""
        manifest = self.dir / "appendonlydir" / "appendonly.aof.manifest"
        names = [
            line.split()[1]
            for line in manifest.read_text().splitlines()
            if line.split()[-1:] == ["i"]
        ]
        assert names, manifest.read_text()
        return manifest.parent / names[-1]

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_redis(
    *, appendonly: bool = True, appendfsync: str = "everysec"
) -> Iterator[PrivateRedis]:
    server = PrivateRedis(appendonly=appendonly, appendfsync=appendfsync)
    server.start()
    try:
        yield server
    finally:
        server.close()


# --- a slow OpenAI-compatible upstream that records disconnects -----------------------------


class SlowUpstream:
    """Streams ``chunks`` content deltas ``interval`` s apart; records each request's fate."""

    def __init__(self, chunks: int = 400, interval: float = 0.05) -> None:
        self.chunks = chunks
        self.interval = interval
        self.requests = 0
        self.started = asyncio.Event()
        self.disconnected = asyncio.Event()
        self.disconnected_at: float | None = None
        self.finished = 0
        self.url = ""

    async def handle(self, request: Request) -> Response:
        await request.body()
        self.requests += 1

        async def stream() -> AsyncIterator[bytes]:
            self.started.set()
            try:
                yield _chunk({"role": "assistant", "content": ""})
                for i in range(self.chunks):
                    yield _chunk({"content": f"w{i} "})
                    await asyncio.sleep(self.interval)
                yield _chunk({}, "stop")
                yield b"data: [DONE]\n\n"
                self.finished += 1
            except BaseException:
                self.disconnected_at = time.monotonic()
                self.disconnected.set()
                raise

        return StreamingResponse(stream(), media_type="text/event-stream")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-slow",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


@contextlib.asynccontextmanager
async def serve_slow_upstream(
    chunks: int = 400, interval: float = 0.05
) -> AsyncIterator[SlowUpstream]:
    mock = SlowUpstream(chunks, interval)
    app = Starlette(routes=[Route("/{path:path}", mock.handle, methods=["POST"])])
    async with serve_asgi(app) as port:
        mock.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        yield mock


# --- gateway instances in their own processes ------------------------------------------------


class GatewayProcess:
    """``python -m tests.app.support.redis_support`` serving the gateway with the Redis backend."""

    def __init__(
        self,
        name: str,
        redis_url: str,
        prefix: str,
        *,
        lease_ttl: float = 1.0,
        upstream_url: str = "",
        snapshot_every: int = 200,
        max_len: int = 10000,
        mcp_url: str = "",
        telemetry: bool = False,
        redis_cluster: bool = False,
    ) -> None:
        self.name = name
        self.prefix = prefix
        self.port = free_port()
        self.args = [
            sys.executable, "-m", "tests.app.support.redis_support",
            "--port", str(self.port), "--redis-url", redis_url, "--prefix", prefix,
            "--lease-ttl", str(lease_ttl), "--upstream", upstream_url,
            "--snapshot-every", str(snapshot_every), "--max-len", str(max_len),
            "--instance", name, "--mcp-url", mcp_url,
        ]  # fmt: skip
        if telemetry:  # [telemetry] enabled; the OTEL_* variables come from this environment
            self.args.append("--telemetry")
        if redis_cluster:  # [gateway] redis_cluster = true: ``redis_url`` is a cluster's seed
            self.args.append("--redis-cluster")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix=f"agw-{name}-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        root = Path(__file__).resolve().parents[3]
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(self.args, cwd=root, stdout=out, stderr=subprocess.STDOUT)

    async def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, self.output()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"gateway {self.name} did not become ready:\n{self.output()}")

    def kill(self) -> None:
        """``kill -9``: no drain, no lease release, nothing."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def _serve(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--upstream", default="")
    parser.add_argument("--snapshot-every", type=int, default=200)
    parser.add_argument("--max-len", type=int, default=10000)
    parser.add_argument("--instance", default="")
    parser.add_argument("--webhook-url", default="")  # completion webhooks (secret: "whsec-test")
    # A request on this conversation stalls for good once it reads the conversation (a stand-in
    # for a dependency that hangs mid-request), so a test can kill the process mid-request.
    parser.add_argument("--hold-conversation", default="")
    # Storing an idempotent answer stalls for good, after setting the key ``P:test:stalled``:
    # the request's work is done (its run accepted) and its answer not stored yet, so a test
    # can kill the process in between.
    parser.add_argument("--stall-idempotent-answers", action="store_true")
    # The "slow" provider's model may call the tools of this MCP server (no approval).
    parser.add_argument("--mcp-url", default="")
    parser.add_argument("--telemetry", action="store_true")
    parser.add_argument("--redis-cluster", action="store_true")
    args = parser.parse_args(argv)

    from app.backends.redis import RedisBackend, cluster_client
    from app.config import Settings
    from app.factory import create_app
    from app.server import GatewayServer
    from tests.app.support.scripted_provider import ScriptedProvider

    providers: dict[str, Any] = {}
    if args.upstream:
        providers["slow"] = {"kind": "openai-chat", "url": args.upstream, "model": "mock-model"}
    mcp: dict[str, Any] = {}
    if args.mcp_url and providers:
        providers["slow"]["mcp_servers"] = ["tools"]
        mcp["servers"] = {"tools": {"url": args.mcp_url, "approval": "never"}}
    settings = Settings(
        gateway={
            "backend": "redis",
            "redis_url": args.redis_url,
            "redis_cluster": args.redis_cluster,
            "lease_ttl_seconds": args.lease_ttl,
            "snapshot_every": args.snapshot_every,
            "event_log_max_len": args.max_len,
            "heartbeat_seconds": 1,
            "shutdown_grace_seconds": 1,
            "log_format": "text",
            "fast_paths": FAST_PATHS,
        },
        providers=providers,
        webhooks={"url": args.webhook_url, "secret": "whsec-test"},
        mcp=mcp,
        telemetry={"enabled": args.telemetry},
    )
    backend = RedisBackend(
        cluster_client(args.redis_url)
        if args.redis_cluster
        else gateway_redis_client(args.redis_url),
        event_log_max_len=args.max_len,
        snapshot_every=args.snapshot_every,
        lease_ttl_seconds=args.lease_ttl,
        key_prefix=args.prefix,
        instance_id=f"{args.instance or 'gw'}-{os.getpid()}",
    )
    if args.hold_conversation:
        _hold_conversation(backend, args.hold_conversation)
    if args.stall_idempotent_answers:
        _stall_idempotent_answers(backend, stalled_key(args.prefix))
    app = create_app(settings, providers={"demo": ScriptedProvider()}, backend=backend)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on"
    )
    GatewayServer(config).run()


def _hold_conversation(backend: Any, key: str) -> None:
    read_meta = backend.get_meta

    async def get_meta(ref: Any) -> Any:
        if ref.key == key:
            await asyncio.Event().wait()
        return await read_meta(ref)

    backend.get_meta = get_meta


def stalled_key(prefix: str) -> str:
    """Set by a gateway started with ``--stall-idempotent-answers`` once an answer stalls."""
    return f"{prefix}:test:stalled"


def _stall_idempotent_answers(backend: Any, marker: str) -> None:
    put = backend.idempotency_put

    async def idempotency_put(scope: str, record: Any, ttl: float) -> bool:
        if ":claim:" in scope or ":released:" in scope:  # the key's claims work as usual
            return bool(await put(scope, record, ttl))
        await backend.redis.set(marker, scope)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    backend.idempotency_put = idempotency_put


class MuteRedis:
    """A loopback server that answers ``+OK`` to every command until ``mute``, then nothing."""

    def __init__(self) -> None:
        self.mute = False
        self.commands = 0
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while line := await reader.readline():
            if line.startswith(b"*"):  # a command's array header (our test commands' only one)
                self.commands += 1
                if not self.mute:
                    writer.write(b"+OK\r\n")
        writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.port

    def pool(self, kind: type[PoolT], *retry_on: type[Exception]) -> PoolT:
        """A pool of ``kind`` on this server (started): a 0.3 s socket timeout, one retry of
        the errors ``retry_on``; RESP2, as the gateway's client speaks (no ``HELLO``)."""
        return kind.from_url(
            f"redis://127.0.0.1:{self.port}/0",
            protocol=2,
            socket_timeout=0.3,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=list(retry_on),
        )


if __name__ == "__main__":
    _serve()
