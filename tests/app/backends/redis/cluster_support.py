"""Redis Cluster helpers of the tests: the shared cluster ``make test`` starts
(``scripts/redis-cluster.sh``, seed :data:`SHARED_CLUSTER_URL`), a key prefix of a test's own
on it (deleted afterwards), and a private cluster on free ports for tests that kill nodes
(:class:`PrivateCluster`, started by the same script).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from app.backends.redis import RedisBackend, cluster_client

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "redis-cluster.sh"
SHARED_CLUSTER_URL = os.environ.get("AGW_TEST_REDIS_CLUSTER_URL", "redis://127.0.0.1:7380")


def gateway_cluster_client(url: str = SHARED_CLUSTER_URL, **options: Any) -> Redis:
    """The client a test gateway's backend uses on a cluster: the app's."""
    return cluster_client(url, **options)


def make_cluster_backend(prefix: str, url: str = SHARED_CLUSTER_URL, **kwargs: Any) -> RedisBackend:
    return RedisBackend(gateway_cluster_client(url), key_prefix=prefix, **kwargs)


@contextlib.asynccontextmanager
async def shared_cluster(prefix: str, url: str = SHARED_CLUSTER_URL) -> AsyncIterator[RedisCluster]:
    """A plain cluster client; every key under ``prefix`` is deleted afterwards (every master
    scanned)."""
    client = RedisCluster.from_url(url, socket_timeout=10, socket_connect_timeout=10)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        async with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.delete(key)
            await pipe.execute()
        await client.aclose()


def _ports_free(base: int) -> bool:
    for port in [base + n for n in range(6)] + [base + 10000 + n for n in range(6)]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_cluster_base() -> int:
    """A first port of six free ones (and their cluster-bus ports, +10000)."""
    for _ in range(200):
        base = random.randrange(20000, 29000)
        if _ports_free(base):
            return base
    raise RuntimeError("no six free ports for a private Redis Cluster")


class PrivateCluster:
    """Three masters and three replicas of this test's own (``scripts/redis-cluster.sh`` on
    free ports, in a temporary directory): a test may kill its nodes."""

    def __init__(self) -> None:
        self.base = free_cluster_base()
        self.dir = Path(tempfile.mkdtemp(prefix="agw-cluster-"))
        self.env = {
            **os.environ,
            "REDIS_CLUSTER_PORT": str(self.base),
            "REDIS_CLUSTER_DIR": str(self.dir / "nodes"),
        }

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.base}"

    @property
    def ports(self) -> list[int]:
        return [self.base + n for n in range(6)]

    def _run(self, action: str) -> None:
        subprocess.run([str(SCRIPT), action], env=self.env, check=True, timeout=120)

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def pid(self, port: int) -> int:
        return int((self.dir / "nodes" / str(port) / "redis.pid").read_text().strip())

    def masters(self) -> dict[int, tuple[int, int]]:
        """Each master's port and its slot range (first, last), from ``CLUSTER NODES``."""
        out: dict[int, tuple[int, int]] = {}
        for line in self.nodes_lines():
            fields = line.split()
            if "master" in fields[2] and "fail" not in fields[2] and len(fields) > 8:
                port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                first, _, last = fields[8].partition("-")
                out[port] = (int(first), int(last or first))
        return out

    def nodes_lines(self) -> list[str]:
        for port in self.ports:
            try:
                out = subprocess.run(
                    ["redis-cli", "-p", str(port), "CLUSTER", "NODES"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                    check=True,
                ).stdout
            except (subprocess.SubprocessError, OSError):
                continue
            if out.strip() and "Could not connect" not in out:
                return out.strip().splitlines()
        return []

    def replica_of(self, master: int) -> int:
        """The port of a replica of the master on port ``master``."""
        lines = [line.split() for line in self.nodes_lines()]
        ids = {int(f[1].split("@")[0].rsplit(":", 1)[1]): f[0] for f in lines}
        for f in lines:
            if "slave" in f[2] and f[3] == ids[master] and "fail" not in f[2]:
                return int(f[1].split("@")[0].rsplit(":", 1)[1])
        raise LookupError(f"no replica of {master}")

    def master_of(self, slot: int) -> int:
        for port, (first, last) in self.masters().items():
            if first <= slot <= last:
                return port
        raise LookupError(f"no master serves slot {slot}")


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    cluster = PrivateCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
