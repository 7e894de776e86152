"""Run every bench that has a target, in sequence; print their tables, summaries and verdicts.

Each bench runs in its own processes (fresh servers), one after the other, so they never
compete with each other for the two cores. ``--quick`` uses smaller sizes; the default sizes
are the issues'. The full output is also written to ``--out`` (default
``/tmp/bench-results.txt``).

Each bench judges its targets on the medians over its rounds (``bench/harness/gate.py``) and
exits non-zero when one is missed or unmeasured; so does this script when any bench did. A
bench whose sizes do not measure a target exits 3 (``EXIT_NOT_MEASURED``): accepted with
``--quick`` (those targets are not gated), a failure without. A ``SUMMARY`` or ``GATE`` line
saying ``FAIL`` fails the bench even when it exited 0.

Usage: ``.venv/bin/python bench/run_all.py [--quick] [--only 1,2,capacity] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.harness.gate import EXIT_NOT_MEASURED, EXIT_PASS  # noqa: E402


@dataclass(frozen=True)
class Bench:
    script: Path
    full: list[str]
    quick: list[str]


BENCHES: dict[str, Bench] = {
    "1": Bench(
        HERE / "throughput_bench.py", ["--rounds", "5"], ["--rounds", "3", "--chunks", "5000"]
    ),
    "2": Bench(HERE / "fanout_bench.py", ["--rounds", "3"], ["--ks", "1,500", "--chunks", "1000"]),
    "3": Bench(HERE / "ttfe_bench.py", ["--rounds", "50"], ["--rounds", "15"]),
    "ttfe_delay": Bench(HERE / "ttfe_delay_bench.py", ["--rounds", "40"], ["--rounds", "10"]),
    "4": Bench(HERE / "gateway_abort_bench.py", ["--runs", "20"], ["--runs", "5"]),
    "5": Bench(HERE / "memory_bench.py", [], ["--conversations", "200", "--events", "10000"]),
    "6": Bench(
        HERE / "redis_ratio_bench.py",
        ["--rounds", "3", "--ks", "1,50,200,500"],
        ["--rounds", "2", "--chunks", "3000", "--ks", "1,50", "--fan-chunks", "1000"],
    ),
    "7": Bench(
        HERE / "peer_bench.py", ["--rounds", "3"], ["--rounds", "1", "--sizes", "2000,20000"]
    ),
    "core": Bench(HERE / "core_bench.py", [], ["--events", "50000", "--repeats", "3"]),
    "abort": Bench(HERE / "abort_bench.py", ["--runs", "20"], ["--runs", "5"]),
    "mcp_abort": Bench(HERE / "mcp_abort_bench.py", ["--runs", "20"], ["--runs", "5"]),
    "capacity": Bench(
        HERE / "capacity_bench.py",
        ["--deltas", "150", "--cs", "100,150,200,250,300,350,400,450,500,550"],
        ["--deltas", "100", "--cs", "50,100,200,400"],
    ),
    "archive": Bench(
        HERE / "archive_bench.py",
        ["--rounds", "3"],
        ["--rounds", "1", "--conversations", "200", "--chunks", "5000"],
    ),
    "cluster": Bench(
        HERE / "cluster_bench.py",
        ["--rounds", "5"],
        ["--rounds", "3", "--chunks", "3000", "--conversations", "100", "--deltas", "50"],
    ),
    "soak": Bench(
        HERE / "soak.py",
        ["--duration", "120", "--redis-restarts", "1"],
        "--duration 30 --conversations 10 --kill-every 15 --redis-restarts 1".split(),
    ),
}

_FAIL = re.compile(r"^(SUMMARY|GATE)\b.*\bFAIL\b")


@dataclass(frozen=True)
class Outcome:
    name: str
    gated: bool
    passed: bool
    why: str

    @property
    def verdict(self) -> str:
        if not self.passed:
            return "FAIL"
        return "PASS" if self.gated else "PASS (some targets not measured: not gated)"


def judge(name: str, returncode: int, stdout: str, quick: bool) -> Outcome:
    """A bench's outcome from its exit code and what it printed."""
    said_fail = [line for line in stdout.splitlines() if _FAIL.match(line)]
    if said_fail:
        return Outcome(name, True, False, f"exit {returncode}; {said_fail[-1]}")
    if returncode == EXIT_PASS:
        return Outcome(name, True, True, "exit 0")
    if returncode == EXIT_NOT_MEASURED:
        if quick:
            return Outcome(name, False, True, "exit 3: --quick sizes do not measure every target")
        return Outcome(name, True, False, "exit 3: a target was not measured")
    return Outcome(name, True, False, f"exit {returncode}")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(
        [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("processor")]
    )
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, ValueError):
        pass
    return (
        f"{cpu}, {cores} cores, {mem} RAM; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(BENCHES), help=f"of {', '.join(BENCHES)}")
    parser.add_argument("--out", default="/tmp/bench-results.txt")
    args = parser.parse_args(argv)
    names = [name for name in args.only.split(",") if name]
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)} (of {', '.join(BENCHES)})")
    out = open(args.out, "w")

    def emit(text: str) -> None:
        print(text, flush=True)
        out.write(text + "\n")
        out.flush()

    emit(f"# machine: {machine()}")
    emit(f"# started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    began = time.monotonic()
    summaries: list[str] = []
    outcomes: list[Outcome] = []
    for name in names:
        bench = BENCHES[name]
        extra = bench.quick if args.quick else bench.full
        command = [sys.executable, str(bench.script), *extra]
        shown = os.path.relpath(bench.script, HERE.parent)
        emit(f"\n$ {' '.join(['.venv/bin/python', str(shown), *extra])}")
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True)
        lines = [ln for ln in result.stdout.splitlines() if "listening on" not in ln]
        emit("\n".join(lines))
        if result.returncode not in (EXIT_PASS, EXIT_NOT_MEASURED):
            emit(f"{name} exited {result.returncode}; stderr's end:\n{result.stderr[-3000:]}")
        summaries += [ln for ln in lines if ln.startswith("SUMMARY")]
        outcomes.append(judge(name, result.returncode, "\n".join(lines), args.quick))
        emit(f"({time.monotonic() - started:.0f} s)")
    emit("\n" + "\n".join(summaries))
    emit("")
    for outcome in outcomes:
        emit(f"RESULT {outcome.name}: {outcome.verdict} ({outcome.why})")
    failed = [outcome.name for outcome in outcomes if not outcome.passed]
    emit(
        f"run_all: {len(outcomes)} benches, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f"; {time.monotonic() - began:.0f} s"
    )
    out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
