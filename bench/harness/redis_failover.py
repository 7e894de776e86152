"""A Redis Cluster the soak fails over: three masters and three replicas of its own, a master
killed with SIGKILL, its replica promoted, the killed node restarted to rejoin as a replica.

Each node is a ``redis-server`` (``cluster-enabled yes``, a short ``cluster-node-timeout``,
``cluster-replica-validity-factor 0`` so a replica always may take over) on free loopback ports
(its client port and its cluster-bus port both chosen free), in a directory of its own, killed
with the soak; the cluster is created with ``redis-cli --cluster create … --cluster-replicas 1``.
No persistence: a killed node is restarted only after its replica was promoted, so it comes back
empty, learns it lost its slots, and syncs from the new master. :meth:`FailoverCluster.fail_over`
kills a master only when every master has a replica in sync (else the shard would be lost).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from bench.harness.cluster import kill_process, spawn
from bench.harness.procs import free_port

__all__ = ["Failover", "FailoverCluster", "NodeView"]

#: ``cluster-node-timeout``: a master unreachable this long is failed over.
NODE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class NodeView:
    """One line of ``CLUSTER NODES``."""

    port: int
    node_id: str
    master: bool
    failed: bool
    master_id: str  # "-" for a master
    slots: tuple[str, ...]


@dataclass
class Failover:
    """One master kill: which node, its slots, the replica promoted, and how long each step
    took (seconds after the kill)."""

    port: int
    slots: str
    promoted: int
    promoted_after: float
    rejoined_after: float


class _Node:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.bus_port = free_port()
        self.directory = directory / str(self.port)
        self.directory.mkdir(parents=True)
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        args = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(self.directory / "nodes.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-replica-validity-factor", "0",
        ]  # fmt: skip
        self.process = await spawn(args, self.directory / "redis.log")
        deadline = time.monotonic() + 30
        while await self.call("PING") is None:
            if self.process.returncode is not None:
                raise RuntimeError(f"redis-server :{self.port} exited: see {self.directory}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server :{self.port} did not start")
            await asyncio.sleep(0.05)

    async def call(self, *command: str) -> Any:
        """The node's answer to ``command``; None when it does not answer."""
        client = Redis(port=self.port, socket_timeout=2, socket_connect_timeout=1)
        try:
            return await client.execute_command(*command)  # type: ignore[no-untyped-call]
        except (RedisError, OSError):
            return None
        finally:
            await client.aclose()

    async def info(self, section: str) -> dict[str, str]:
        text = await self.call("INFO", section)
        if not isinstance(text, dict):
            return {}
        return {str(k): str(v) for k, v in text.items()}

    async def kill(self, sig: int = signal.SIGKILL) -> None:
        await kill_process(self.process, sig)


def _parse_nodes(text: str) -> list[NodeView]:
    views: list[NodeView] = []
    for line in text.strip().splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1] or 0)
        flags = fields[2].split(",")
        views.append(
            NodeView(
                port,
                fields[0],
                "master" in flags,
                "fail" in flags or "fail?" in flags,
                fields[3],
                tuple(fields[8:]),
            )
        )
    return views


class FailoverCluster:
    """Six nodes (three masters, three replicas) on free loopback ports under ``directory``."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.directory = directory / "redis-cluster"
        self.nodes = [_Node(self.directory) for _ in range(2 * masters)]
        self.masters_count = masters
        self.failovers: list[Failover] = []

    @property
    def url(self) -> str:
        """The seed ``redis_url`` a gateway takes."""
        return f"redis://{self.nodes[0].address}"

    @property
    def addresses(self) -> list[str]:
        """Every node as ``host:port`` (``redis_cluster_nodes``)."""
        return [node.address for node in self.nodes]

    def pids(self) -> list[int]:
        return [n.process.pid for n in self.nodes if n.process and n.process.returncode is None]

    async def start(self, within: float = 60.0) -> None:
        await asyncio.gather(*(node.start() for node in self.nodes))
        create = await asyncio.create_subprocess_exec(
            "redis-cli", "--cluster", "create", *self.addresses,
            "--cluster-replicas", "1", "--cluster-yes",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(create.communicate(), within)
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out[-500:]!r}")
        await self.wait_healthy(within)

    async def stop(self) -> None:
        await asyncio.gather(*(node.kill(signal.SIGTERM) for node in self.nodes))

    async def view(self) -> list[NodeView]:
        """``CLUSTER NODES`` as the first node that answers sees it."""
        for node in self.nodes:
            text = await node.call("CLUSTER", "NODES")
            if text:
                return _parse_nodes(text.decode() if isinstance(text, bytes) else str(text))
        return []

    async def healthy(self) -> bool:
        """Every node up and agreeing the cluster is ok, ``masters`` masters serving every slot,
        each with one replica whose link to it is up."""
        for node in self.nodes:
            info = await node.call("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info or "")
            if "cluster_state:ok" not in text or "cluster_slots_ok:16384" not in text:
                return False
        views = await self.view()
        masters = [v for v in views if v.master and not v.failed and v.slots]
        if len(masters) != self.masters_count or any(v.failed for v in views):
            return False
        by_port = {node.port: node for node in self.nodes}
        for master in masters:
            replicas = [v for v in views if v.master_id == master.node_id]
            if len(replicas) != 1:
                return False
            info = await by_port[replicas[0].port].info("replication")
            if info.get("master_link_status") != "up" or info.get("master_sync_in_progress") != "0":
                return False
        return True

    async def wait_healthy(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while not await self.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster under {self.directory} is not healthy")
            await asyncio.sleep(0.2)

    async def pick_master(self, rng: random.Random) -> NodeView:
        """A master, once every master has a replica in sync."""
        await self.wait_healthy()
        return rng.choice([v for v in await self.view() if v.master and v.slots])

    async def fail_over(self, victim: NodeView, within: float = 60.0) -> Failover:
        """SIGKILL the master ``victim``; wait until its replica serves its slots; restart it
        and wait until it is that replica's replica, in sync."""
        node = next(n for n in self.nodes if n.port == victim.port)
        replica = next(v for v in await self.view() if v.master_id == victim.node_id)
        killed_at = time.monotonic()
        await node.kill()
        deadline = killed_at + within
        promoted = next(n for n in self.nodes if n.port == replica.port)
        while True:
            role = await promoted.info("replication")
            state = await promoted.call("CLUSTER", "INFO")
            text = state.decode() if isinstance(state, bytes) else str(state or "")
            if role.get("role") == "master" and "cluster_state:ok" in text:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replica took over from :{victim.port}")
            await asyncio.sleep(0.05)
        promoted_after = time.monotonic() - killed_at
        await node.start()
        while True:
            info = await node.info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f":{victim.port} did not rejoin as a replica")
            await asyncio.sleep(0.05)
        done = Failover(
            victim.port,
            " ".join(victim.slots),
            replica.port,
            promoted_after,
            time.monotonic() - killed_at,
        )
        self.failovers.append(done)
        return done
