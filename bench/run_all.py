"""Run every figure of BENCHMARKS.md in sequence and print their tables and summary lines.

Each figure runs in its own processes (fresh servers), one after the other, so they never
compete with each other for the two cores. ``--quick`` uses smaller sizes (about a minute in
all); the default sizes are the issue's (several minutes). The full output is also written to
``--out`` (default ``/tmp/bench-results.txt``).

Usage: ``.venv/bin/python bench/run_all.py [--quick] [--only 1,2,3] [--out FILE]``
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FIGURES: dict[str, tuple[str, list[str], list[str]]] = {
    # figure: (script, default args, --quick args)
    "1": ("throughput_bench.py", ["--rounds", "5"], ["--rounds", "3", "--chunks", "5000"]),
    "2": ("fanout_bench.py", [], ["--ks", "1,50,200", "--chunks", "1000"]),
    "3": ("ttfe_bench.py", ["--rounds", "50"], ["--rounds", "15"]),
    "4": ("gateway_abort_bench.py", ["--runs", "20"], ["--runs", "5"]),
    "5": ("memory_bench.py", [], ["--conversations", "200", "--events", "10000"]),
    "6": (
        "redis_ratio_bench.py",
        ["--rounds", "3", "--ks", "1,50,200,500"],
        ["--rounds", "2", "--chunks", "3000", "--ks", "1,50", "--fan-chunks", "1000"],
    ),
    "7": ("peer_bench.py", ["--rounds", "3"], ["--rounds", "1", "--sizes", "2000,5000"]),
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(FIGURES))
    parser.add_argument("--out", default="/tmp/bench-results.txt")
    args = parser.parse_args()
    out = open(args.out, "w")

    def emit(text: str) -> None:
        print(text, flush=True)
        out.write(text + "\n")
        out.flush()

    emit(f"# machine: {machine()}")
    emit(f"# started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    summaries = []
    for figure in args.only.split(","):
        script, default, quick = FIGURES[figure]
        command = [sys.executable, str(HERE / script), *(quick if args.quick else default)]
        emit(f"\n$ {' '.join(['.venv/bin/python', 'bench/' + script, *command[2:]])}")
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True)
        lines = [ln for ln in result.stdout.splitlines() if "listening on" not in ln]
        emit("\n".join(lines))
        if result.returncode != 0:
            emit(f"figure {figure} FAILED (exit {result.returncode}):\n{result.stderr[-3000:]}")
            summaries.append(f"SUMMARY figure{figure} ERROR exit {result.returncode}")
        summaries += [ln for ln in lines if ln.startswith("SUMMARY")]
        emit(f"({time.monotonic() - started:.0f} s)")
    emit("\n" + "\n".join(summaries))
    out.close()


if __name__ == "__main__":
    main()
