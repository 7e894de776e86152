"""The soak on a Redis Cluster of its own (``bench/soak.py --redis-cluster``): a short one with
one master killed (SIGKILL) mid-soak keeps every promise the soak checks, and its plan places
the master kills between the gateway kills."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Options, Soak, run_soak

pytestmark = pytest.mark.slow


def test_the_cluster_plan_kills_masters_halfway_between_gateway_kills(tmp_path: Path) -> None:
    opts = Options(duration=300, kill_every=60, master_kills=3, redis_cluster=True)
    assert Soak(opts, tmp_path, "http://127.0.0.1:9").plan() == [
        (60, "kill"),
        (90.0, "master"),
        (120, "kill"),
        (150.0, "master"),
        (180, "kill"),
        (210.0, "master"),
        (240, "kill"),
    ]


def test_a_master_killed_mid_soak_loses_no_run_and_no_event_with_wait_replicas() -> None:
    # No gateway kill (kill_every = duration): the master kill halfway is the soak's one
    # disruption; two gateways, six conversations, runs streaming on every shard.
    opts = Options(
        duration=30,
        conversations=6,
        kill_every=30,
        master_kills=1,
        redis_cluster=True,
        wait_replicas=1,
        seed=7,
        quiet=True,
    )
    result = run_soak(opts)
    assert result.passed, result.report
    summary = result.summary
    assert "master_kills=1 " in summary and " kills=0 " in summary, summary
    assert "lost_events=0 repeated_events=0" in summary, summary
    runs = int(summary.split(" runs=")[1].split()[0])
    assert runs >= 20, summary  # every conversation ran through the failover
    assert "Master kills" in result.report
