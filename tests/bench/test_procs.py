"""The benches' Redis persists as ``docker-compose.yml`` deploys it: an append-only file,
fsynced every second."""

from __future__ import annotations

import pytest
import redis

from bench.harness import procs


def _persistence(url: str) -> tuple[str, str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        got = {**client.config_get("appendonly"), **client.config_get("appendfsync")}
        return str(got["appendonly"]), str(got["appendfsync"])
    finally:
        client.close()


def test_a_redis_the_bench_starts_has_the_deployed_append_only_file() -> None:
    with procs.redis_process() as server:
        assert _persistence(server.url) == ("yes", "everysec")
        client = redis.Redis.from_url(server.url)
        try:
            client.set("k", "v")
            assert client.info("persistence")["aof_enabled"] == 1
        finally:
            client.close()


def test_a_bench_about_persistence_off_can_ask_for_none() -> None:
    with procs.redis_process(persistence=False) as server:
        assert _persistence(server.url)[0] == "no"


def test_a_redis_found_running_persists_for_the_bench_then_is_set_back() -> None:
    with procs.redis_process("--appendfsync", "always", persistence=False) as server:
        assert _persistence(server.url) == ("no", "always")
        with procs.persistent(server.url):
            assert _persistence(server.url) == ("yes", "everysec")
            client = redis.Redis.from_url(server.url)
            try:
                info = client.info("persistence")
                assert info["aof_enabled"] == 1
                assert info["aof_rewrite_in_progress"] == 0
            finally:
                client.close()
        assert _persistence(server.url) == ("no", "always")


def test_a_fleet_knows_which_redis_each_gateway_reads() -> None:
    assert procs.VARIANTS["memory"][1] is None
    assert procs.VARIANTS["redis"][1] == "standalone"
    assert procs.VARIANTS["redis-public"][1:] == ("standalone", {"fast_paths": False})
    for name in ("cluster", "cluster-wait"):
        backend, reads, settings = procs.VARIANTS[name]
        assert (backend, reads, settings["redis_cluster"]) == ("redis", "cluster", True)
    assert procs.VARIANTS["cluster-wait"][2]["redis_wait_replicas"] == 1
    with procs.redis_process(persistence=False) as server:
        fleet = procs.Fleet(server, None, {})
        assert fleet.redis_cpu_seconds("memory") == 0.0
        assert fleet.redis_cpu_seconds("redis") > 0.0


def test_an_unknown_variant_starts_nothing() -> None:
    with pytest.raises(ValueError, match="unknown gateway variants"), procs.fleet(("mongo",)):
        pass
