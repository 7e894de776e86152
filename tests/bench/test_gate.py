"""A bench's gate: a target passes only when measured and met, judged on the median of rounds."""

from __future__ import annotations

import math

import pytest

from bench.harness.gate import EXIT_FAIL, EXIT_NOT_MEASURED, EXIT_PASS, Gate, Verdict, value_of


@pytest.mark.parametrize("missing", [None, math.nan, math.inf, [], [math.nan, math.nan, 1.0]])
def test_an_unmeasured_figure_fails(missing: float | list[float] | None) -> None:
    gate = Gate("b")
    assert gate.at_most("p99", missing, 100.0) is Verdict.FAIL
    assert gate.at_least("ratio", missing, 0.5) is Verdict.FAIL
    assert gate.verdict is Verdict.FAIL
    assert gate.exit_code == EXIT_FAIL
    assert "not measured" in gate.report()


def test_the_median_of_the_rounds_is_judged() -> None:
    one_bad_round = Gate("b")
    assert one_bad_round.at_most("p99", [30.0, 500.0, 40.0], 100.0) is Verdict.PASS
    two_bad_rounds = Gate("b")
    assert two_bad_rounds.at_most("p99", [30.0, 500.0, 140.0], 100.0) is Verdict.FAIL
    assert value_of([3.0, 1.0, 2.0]) == 2.0
    assert Gate("b").at_least("ratio", [0.4, 0.6, 0.55], 0.5) is Verdict.PASS
    assert Gate("b").at_least("ratio", [0.4, 0.6, 0.45], 0.5) is Verdict.FAIL


def test_bounds_are_inclusive_and_a_miss_fails() -> None:
    gate = Gate("b")
    assert gate.at_most("cpu", 10.0, 10.0) is Verdict.PASS
    assert gate.at_least("ratio", 1.0, 1.0) is Verdict.PASS
    assert gate.exit_code == EXIT_PASS
    assert gate.at_most("cpu", 10.01, 10.0) is Verdict.FAIL
    assert gate.exit_code == EXIT_FAIL
    assert gate.report().splitlines()[-1] == "GATE b FAIL"


def test_a_target_the_sizes_do_not_measure_is_not_a_pass() -> None:
    gate = Gate("b")
    gate.at_most("p99", 10.0, 100.0)
    gate.not_measured("ratio", "K=1 not run")
    assert gate.verdict is Verdict.NOT_MEASURED
    assert gate.exit_code == EXIT_NOT_MEASURED
    gate.holds("all delivered", False)
    assert gate.exit_code == EXIT_FAIL  # a miss outweighs what was not measured


def test_a_gate_that_judged_nothing_fails() -> None:
    gate = Gate("b")
    assert gate.verdict is Verdict.FAIL
    assert gate.exit_code == EXIT_FAIL
