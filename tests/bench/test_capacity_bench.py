"""The capacity bench's timeline: deliveries, p99 and server CPU per 200 ms of emit time."""

from __future__ import annotations

import pytest

from bench.capacity_bench import TIMELINE_BUCKET, _timeline


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
