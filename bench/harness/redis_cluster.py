"""A private Redis Cluster for the benches: masters and replicas on free loopback ports.

Started like the benches' standalone Redis (:func:`bench.harness.procs.redis_process`: a
directory of its own, the deployed append-only file, killed with the bench), then joined with
``redis-cli --cluster create … --cluster-replicas N``. Each node's CPU time comes from
``/proc/<pid>``, so a bench counts the gateway with every Redis process (masters and replicas),
and can tell the masters apart (``ROLE``) to see how evenly the load spreads.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.harness.procs import PERSISTENCE, die_with_parent, pid_cpu_seconds

__all__ = ["ClusterNode", "RedisCluster", "free_node_port", "redis_cluster"]

#: A node's cluster bus listens on its port + 10000.
BUS_OFFSET = 10000


@dataclass(frozen=True)
class ClusterNode:
    port: int
    pid: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        return pid_cpu_seconds(self.pid)

    def role(self) -> str:
        """``"master"`` or ``"slave"``, as the node says now."""
        client = redis.Redis(port=self.port, socket_timeout=5)
        try:
            role: list[bytes] = client.role()
            return role[0].decode()
        finally:
            client.close()


@dataclass(frozen=True)
class RedisCluster:
    """The nodes of a running private cluster; ``url`` is the seed ``redis_cluster`` takes."""

    nodes: tuple[ClusterNode, ...]

    @property
    def url(self) -> str:
        return f"redis://{self.nodes[0].address}/0"

    def masters(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.role() == "master"]

    def replicas(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.role() != "master"]

    def cpu_seconds(self) -> float:
        """CPU time so far of every node, masters and replicas."""
        return sum(node.cpu_seconds() for node in self.nodes)

    def cpu_by_node(self) -> dict[int, float]:
        """CPU time so far per node, by port."""
        return {node.port: node.cpu_seconds() for node in self.nodes}


def free_node_port() -> int:
    """A free loopback port whose cluster bus port (the port + 10000) is free too."""
    while True:
        port = random.randint(20000, 50000)
        with contextlib.ExitStack() as held:
            try:
                for candidate in (port, port + BUS_OFFSET):
                    sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return port


def _wait_listening(port: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"redis-server on 127.0.0.1:{port} did not start")


def _ready(nodes: list[ClusterNode], replicas: int) -> bool:
    """Every slot served, every node known, every replica attached and in sync."""
    seed = redis.Redis(port=nodes[0].port, socket_timeout=5, decode_responses=True)
    try:
        info = seed.cluster("INFO")
    finally:
        seed.close()
    if isinstance(info, str):
        info = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    if str(info.get("cluster_state")) != "ok" or int(info.get("cluster_slots_ok", 0)) != 16384:
        return False
    if int(info.get("cluster_known_nodes", 0)) != len(nodes):
        return False
    synced = 0
    for node in nodes:
        client = redis.Redis(port=node.port, socket_timeout=5, decode_responses=True)
        try:
            got = client.info("replication")
        finally:
            client.close()
        if got.get("role") == "slave":
            if got.get("master_link_status") != "up":
                return False
            synced += 1
    return synced == len(nodes) - len(nodes) // (replicas + 1)


@contextlib.contextmanager
def redis_cluster(
    masters: int = 3, replicas: int = 1, *, persistence: bool = True, within: float = 60.0
) -> Iterator[RedisCluster]:
    """A private cluster of ``masters`` masters with ``replicas`` replicas each, every node a
    ``redis-server`` of its own (``cluster-enabled yes``, the deployed append-only file unless
    ``persistence=False``), stopped on exit."""
    if masters < 3:
        raise ValueError("redis-cli --cluster create needs at least 3 masters")
    directory = tempfile.mkdtemp(prefix="bench-redis-cluster-")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        nodes: list[ClusterNode] = []
        for _ in range(masters * (1 + replicas)):
            port = free_node_port()
            node_dir = Path(directory) / str(port)
            node_dir.mkdir()
            process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(node_dir),
                    "--save",
                    "",
                    *(PERSISTENCE if persistence else ("--appendonly", "no")),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(node_dir / "nodes.conf"),
                    "--cluster-node-timeout",
                    "2000",
                ],
                stdout=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
            processes.append(process)
            nodes.append(ClusterNode(port, process.pid))
        for node in nodes:
            _wait_listening(node.port)
        create = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(node.address for node in nodes),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=within,
            check=False,
        )
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-500:]!r}")
        deadline = time.monotonic() + within
        while not _ready(nodes, replicas):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster was not ready in {within} s")
            time.sleep(0.1)
        yield RedisCluster(tuple(nodes))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        shutil.rmtree(directory, ignore_errors=True)
