"""The benches' private Redis Cluster: three masters and three replicas on loopback, every slot
served, each node persisting as deployed and its CPU readable, and gone when the block ends."""

from __future__ import annotations

import socket

import pytest
import redis
from redis.cluster import RedisCluster as Client

from bench.harness.redis_cluster import BUS_OFFSET, free_node_port, redis_cluster


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


def test_a_free_node_port_has_its_bus_port_free_too() -> None:
    port = free_node_port()
    assert port + BUS_OFFSET < 65536
    for candidate in (port, port + BUS_OFFSET):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", candidate))


@pytest.mark.slow  # six redis-servers of its own
def test_the_cluster_serves_every_slot_with_a_replica_per_master() -> None:
    with redis_cluster() as cluster:
        masters, replicas = cluster.masters(), cluster.replicas()
        assert len(masters) == 3 and len(replicas) == 3
        client = Client.from_url(cluster.url)
        try:
            for n in range(30):  # keys over all three shards
                client.set(f"k{n}", n)
            assert sorted(int(client.get(f"k{n}") or -1) for n in range(30)) == list(range(30))
        finally:
            client.close()
        for node in masters:
            direct = redis.Redis(port=node.port)
            try:
                assert direct.dbsize() > 0  # each master holds part of the keys
            finally:
                direct.close()
        cpu = cluster.cpu_by_node()
        assert set(cpu) == {node.port for node in cluster.nodes}
        assert all(seconds > 0 for seconds in cpu.values())
        assert cluster.cpu_seconds() >= sum(cpu.values())
        for node in cluster.nodes:  # each node persists as deployed
            direct = redis.Redis(port=node.port, decode_responses=True)
            try:
                got = {**direct.config_get("appendonly"), **direct.config_get("appendfsync")}
                assert got == {"appendonly": "yes", "appendfsync": "everysec"}
            finally:
                direct.close()
        ports = [node.port for node in cluster.nodes]
    assert not any(_listening(port) for port in ports)
