"""Shared helpers for the Redis backend tests: a client on the shared Redis with a per-test key
prefix (cleaned up afterwards), and a private ``redis-server`` for tests that stop or restart it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from redis.asyncio import Redis

SHARED_REDIS_URL = os.environ.get("AGW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def unique_prefix() -> str:
    return f"agwtest-{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def shared_redis(prefix: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(SHARED_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` of our own on a free port, with RDB saved on shutdown, restartable."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agw-redis-"))
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
                "--appendonly", "no",
                "--daemonize", "no",
                "--logfile", str(self.dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        """Graceful stop: SIGTERM makes redis save its RDB, so data survives a restart."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()
