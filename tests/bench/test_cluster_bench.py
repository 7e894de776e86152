"""The cluster bench: the rounds' order, the busiest master's share, and the gate on issue 52's
targets (a figure not measured fails)."""

from __future__ import annotations

import math

from bench.cluster_bench import Series, Spread, busiest_share, judge, ratio, rotated
from bench.harness.gate import EXIT_FAIL, EXIT_PASS, Verdict


def test_each_round_starts_with_the_next_variant() -> None:
    names = ("memory", "redis", "cluster")
    assert [rotated(names, n)[0] for n in range(4)] == ["memory", "redis", "cluster", "memory"]
    assert sorted(rotated(names, 2)) == sorted(names)


def test_the_busiest_share_is_the_largest_nodes_part_of_the_sum() -> None:
    assert busiest_share({1: 1.0, 2: 1.0, 3: 2.0}) == 0.5
    assert math.isclose(busiest_share({1: 1.0, 2: 1.0, 3: 1.0}), 1 / 3)
    assert math.isnan(busiest_share({1: 0.0, 2: 0.0}))
    assert math.isnan(busiest_share({}))


def test_a_ratio_is_of_the_medians() -> None:
    assert ratio([1.0, 8.0, 4.0], [2.0, 2.0, 100.0]) == 2.0
    assert math.isnan(ratio([1.0], []))


def _series(events: float, total: float) -> Series:
    return Series([events] * 3, [total / 2] * 3, [total] * 3, [0.0] * 3)


def _spreads(*shares: tuple[float, float, float], complete: bool = True) -> list[Spread]:
    return [
        Spread(complete, dict(enumerate(cpu)), dict.fromkeys(range(3), 33), 50.0) for cpu in shares
    ]


def _verdicts(series: dict[str, Series], spreads: list[Spread]) -> dict[str, Verdict]:
    return {check.name: check.verdict for check in judge(series, spreads).checks}


def test_the_gate_passes_a_cluster_within_every_target() -> None:
    series = {
        "redis": _series(10000.0, 40.0),
        "cluster": _series(9000.0, 48.0),
        "cluster-wait": _series(7000.0, 55.0),
    }
    spreads = _spreads((1.0, 1.1, 0.9), (1.0, 1.3, 0.9), (2.0, 1.0, 1.0))
    gate = judge(series, spreads)
    assert gate.exit_code == EXIT_PASS, gate.report()


def test_each_missed_target_fails() -> None:
    series = {
        "redis": _series(10000.0, 40.0),
        "cluster": _series(7000.0, 60.0),
        "cluster-wait": _series(7000.0, 55.0),
    }
    spreads = _spreads((1.0, 1.0, 3.0), (1.0, 1.0, 3.0), (1.0, 1.0, 1.0))
    verdicts = _verdicts(series, spreads)
    assert verdicts["cluster/standalone events/s"] is Verdict.FAIL
    assert verdicts["cluster/standalone CPU/event (gateway+redis)"] is Verdict.FAIL
    assert verdicts["busiest master's share of the masters' CPU"] is Verdict.FAIL
    assert verdicts["spread: all delivered"] is Verdict.PASS
    lossy = _spreads((1.0, 1.0, 1.0), complete=False)
    assert _verdicts(series, lossy)["spread: all delivered"] is Verdict.FAIL


def test_a_figure_not_measured_fails() -> None:
    gate = judge({"redis": _series(10000.0, 40.0)}, [])
    assert gate.exit_code == EXIT_FAIL
    assert {check.verdict for check in gate.checks} == {Verdict.FAIL}
