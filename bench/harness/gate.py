"""A bench's targets, judged: each a bound on the median over its rounds, and its exit code.

A target whose value is missing (``None``, no rounds, NaN or infinite) fails: an unmeasured
figure never passes. A bench whose sizes cannot measure a target (``fanout_bench.py --ks
50,500`` has no K = 1 to compare with) says so with :meth:`Gate.not_measured`; it then exits
with :data:`EXIT_NOT_MEASURED`, which ``run_all.py --quick`` accepts and a full run does not.

The exit codes: :data:`EXIT_PASS` (every target met), :data:`EXIT_FAIL` (a target missed or
unmeasured), :data:`EXIT_NOT_MEASURED` (every measured target met, some not measured).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.harness.stats import median

__all__ = [
    "EXIT_FAIL",
    "EXIT_NOT_MEASURED",
    "EXIT_PASS",
    "Check",
    "Gate",
    "Verdict",
    "value_of",
]

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_NOT_MEASURED = 3


class Verdict(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_MEASURED = "NOT MEASURED"


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str


def value_of(value: float | Sequence[float] | None) -> float | None:
    """The figure judged: the median of the rounds, or the value itself; ``None`` when it was
    not measured (no value, no rounds, NaN, infinite)."""
    if value is None:
        return None
    figure = median(value) if isinstance(value, Sequence) else float(value)
    return figure if math.isfinite(figure) else None


def _show(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4g}"


class Gate:
    """The targets of one bench run, each judged as it is added."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.checks: list[Check] = []

    def _add(self, name: str, verdict: Verdict, detail: str) -> Verdict:
        self.checks.append(Check(name, verdict, detail))
        return verdict

    def _bound(
        self,
        name: str,
        value: float | Sequence[float] | None,
        bound: float,
        unit: str,
        at_most: bool,
    ) -> Verdict:
        figure = value_of(value)
        sign = "<=" if at_most else ">="
        detail = f"{_show(figure)}{unit} (target {sign} {bound:g}{unit})"
        if figure is None:
            return self._add(name, Verdict.FAIL, detail)
        met = figure <= bound if at_most else figure >= bound
        return self._add(name, Verdict.PASS if met else Verdict.FAIL, detail)

    def at_most(
        self, name: str, value: float | Sequence[float] | None, bound: float, unit: str = ""
    ) -> Verdict:
        """``value`` (a figure, or its rounds: their median is judged) ≤ ``bound``."""
        return self._bound(name, value, bound, unit, at_most=True)

    def at_least(
        self, name: str, value: float | Sequence[float] | None, bound: float, unit: str = ""
    ) -> Verdict:
        """``value`` (a figure, or its rounds: their median is judged) ≥ ``bound``."""
        return self._bound(name, value, bound, unit, at_most=False)

    def holds(self, name: str, ok: bool, detail: str = "") -> Verdict:
        """A condition every round must meet (every event delivered, every run ended)."""
        return self._add(name, Verdict.PASS if ok else Verdict.FAIL, detail or str(ok))

    def not_measured(self, name: str, why: str) -> Verdict:
        """A target these sizes cannot measure (``why``): not a pass."""
        return self._add(name, Verdict.NOT_MEASURED, why)

    @property
    def verdict(self) -> Verdict:
        verdicts = {check.verdict for check in self.checks}
        if not verdicts or Verdict.FAIL in verdicts:
            return Verdict.FAIL  # a bench that judged nothing measured nothing
        if Verdict.NOT_MEASURED in verdicts:
            return Verdict.NOT_MEASURED
        return Verdict.PASS

    @property
    def exit_code(self) -> int:
        return {
            Verdict.PASS: EXIT_PASS,
            Verdict.FAIL: EXIT_FAIL,
            Verdict.NOT_MEASURED: EXIT_NOT_MEASURED,
        }[self.verdict]

    def report(self) -> str:
        """One ``GATE`` line per target, then the bench's verdict."""
        lines = [
            f"GATE {self.bench} {check.name}: {check.detail} {check.verdict.value}"
            for check in self.checks
        ]
        if not self.checks:
            lines.append(f"GATE {self.bench}: no target judged")
        lines.append(f"GATE {self.bench} {self.verdict.value}")
        return "\n".join(lines)

    def finish(self) -> int:
        """Print the report; the exit code for ``sys.exit``."""
        print(self.report(), flush=True)
        return self.exit_code
