"""The capacity bench: its timeline (deliveries, p99 and server CPU per 200 ms of emit time),
its capacity (the median p99 over rounds) and the gate on the capacity ratios (Redis, Redis Cluster
and memory against memory or the normalizer)."""

from __future__ import annotations

import pytest

from bench.capacity_bench import TIMELINE_BUCKET, Step, _timeline, capacity, judge, judge_ratio
from bench.harness.gate import EXIT_NOT_MEASURED, Gate, Verdict


def test_each_delivery_and_cpu_sample_lands_in_the_bucket_of_its_emit_time() -> None:
    t0 = 1000.0
    emits = [t0, t0 + 0.05, t0 + 0.25, t0 + 0.41]
    latencies = [0.010, 0.002, 0.030, 0.004]
    # The server's CPU seconds sampled over time: 0.1 s used from t0 to t0 + 0.2, 0.02 after.
    cpu = [(t0 - 0.1, 5.0), (t0, 5.0), (t0 + 0.1, 5.05), (t0 + 0.2, 5.1), (t0 + 0.3, 5.12)]
    rows = _timeline(emits, latencies, cpu)
    assert [(at, n) for at, n, _, _ in rows] == [(0.0, 2), (TIMELINE_BUCKET, 1), (0.4, 1)]
    assert rows[0][2] == pytest.approx(10.0, abs=0.2)  # p99 of 10 and 2 ms
    assert rows[1][2] == pytest.approx(30.0)
    assert rows[0][3] == pytest.approx(50.0)  # 0.1 s of CPU in 0.2 s
    assert rows[1][3] == pytest.approx(10.0)
    assert rows[2][3] == 0.0  # no sample there


def test_no_delivery_no_timeline() -> None:
    assert _timeline([], [], [(1.0, 1.0), (2.0, 2.0)]) == []


def _steps(*p99s_per_c: tuple[int, list[float]], complete: bool = True) -> dict[int, list[Step]]:
    return {c: [Step(c, complete, p99 / 2, p99, 1.0) for p99 in p99s] for c, p99s in p99s_per_c}


def test_a_step_holds_on_the_median_p99_of_its_rounds() -> None:
    # C = 200 went over the budget in one round of three: its median held.
    steps = _steps(
        (100, [40.0, 50.0, 45.0]), (200, [60.0, 180.0, 70.0]), (300, [90.0, 150.0, 130.0])
    )
    assert capacity(steps, 100.0) == 200
    lossy = _steps((100, [40.0]), (200, [50.0]), complete=False)
    assert capacity(lossy, 100.0) == 0


def _gate(a: int, b: int, top: int = 550, bound: float = 0.5) -> Gate:
    gate = Gate("capacity")
    judge_ratio(gate, "redis/memory C", a, b, top, bound)
    return gate


def test_a_capacity_ratio_is_judged_when_both_are_bounded() -> None:
    assert _gate(250, 450).verdict is Verdict.PASS
    assert _gate(200, 450).verdict is Verdict.FAIL
    assert _gate(0, 450).verdict is Verdict.FAIL  # the dividend held no C tried


def test_a_divisor_at_the_largest_c_tried_leaves_the_ratio_unmeasured() -> None:
    # Memory held every C tried: it may hold far more, so 300/400 proves nothing.
    assert _gate(300, 400, top=400).verdict is Verdict.NOT_MEASURED
    assert _gate(400, 400, top=400).verdict is Verdict.NOT_MEASURED
    assert _gate(300, 0).verdict is Verdict.NOT_MEASURED


def test_a_divisor_at_the_largest_c_tried_still_proves_a_miss() -> None:
    # Memory held every C tried (40): the ratio is at most 5/40, below 0.5 whatever memory holds.
    gate = _gate(5, 40, top=40)
    assert gate.verdict is Verdict.FAIL
    assert "<= 0.12" in gate.checks[0].detail
    assert _gate(20, 40, top=40).verdict is Verdict.NOT_MEASURED  # at most 0.5: may pass


def test_a_dividend_at_the_largest_c_tried_proves_a_pass_only() -> None:
    assert _gate(400, 300, top=400, bound=0.8).verdict is Verdict.PASS  # >= 1.33
    assert _gate(100, 300, top=100, bound=0.8).verdict is Verdict.NOT_MEASURED  # >= 0.33


def test_the_gate_judges_every_ratio() -> None:
    out = {
        "memory": _steps((100, [50.0]), (200, [60.0]), (300, [150.0])),
        "redis": _steps((100, [80.0]), (200, [120.0]), (300, [300.0])),
        "cluster": _steps((100, [90.0]), (200, [130.0]), (300, [300.0])),
        "normalizer": _steps((100, [50.0]), (200, [150.0]), (300, [200.0])),
    }
    gate = judge(out, [100, 200, 300], 100.0)
    verdicts = {check.name: check.verdict for check in gate.checks}
    assert verdicts == {
        "redis/memory C": Verdict.PASS,
        "cluster/memory C": Verdict.PASS,
        "memory/normalizer C": Verdict.PASS,
    }
    out["redis"] = {}
    assert judge(out, [100, 200, 300], 100.0).exit_code == EXIT_NOT_MEASURED


def test_a_cluster_below_half_of_memory_fails() -> None:
    out = {
        "memory": _steps((100, [50.0]), (200, [60.0]), (300, [150.0])),
        "redis": _steps((100, [80.0]), (200, [120.0]), (300, [300.0])),
        "cluster": _steps((100, [150.0]), (200, [300.0]), (300, [300.0])),
        "normalizer": _steps((100, [50.0]), (200, [150.0]), (300, [200.0])),
    }
    verdicts = {c.name: c.verdict for c in judge(out, [100, 200, 300], 100.0).checks}
    assert verdicts["cluster/memory C"] is Verdict.FAIL
    del out["cluster"]  # a run without the cluster (--backends memory,redis) did not measure it
    verdicts = {c.name: c.verdict for c in judge(out, [100, 200, 300], 100.0).checks}
    assert verdicts["cluster/memory C"] is Verdict.NOT_MEASURED
