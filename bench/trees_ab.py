r"""Runs one bench against several source trees in alternating rounds; prints the medians.

Each round runs the bench once per tree (the order rotates every round), with the tree as the
working directory, so the bench and the app it serves are that tree's. The figures are the
numbers of the bench's ``GATE <bench> <name>: <value>`` lines; the table shows, per figure, each
tree's median over the rounds and its ratio to the first tree's.

Usage: ``.venv/bin/python bench/trees_ab.py --trees /tmp/before,. [--rounds 5]
[--figure NAME=REGEX] -- bench/ttfe_bench.py --rounds 10`` (``--figure`` adds a figure the
bench prints only in a table, e.g. ``'cpu=^200 +yes +\S+ +\S+ +\S+ +(\S+)'``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

GATE = re.compile(r"^GATE \S+ (?P<name>[^:]+): (?P<value>-?[\d.]+)")


def figures(output: str, extra: dict[str, re.Pattern[str]]) -> dict[str, float]:
    """The ``GATE`` figures of one bench run, and each ``extra`` pattern's first group."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        match = GATE.match(line)
        if match:
            found[match["name"]] = float(match["value"])
        for name, pattern in extra.items():
            if (hit := pattern.search(line)) is not None:
                found[name] = float(hit[1])
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", required=True, help="source trees, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--figure",
        action="append",
        default=[],
        help="NAME=REGEX: also a figure, the first group of REGEX in the output (a table cell)",
    )
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- the bench and its options")
    args = parser.parse_args()
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]
    command = [arg for arg in args.bench if arg != "--"]
    extra = {
        name: re.compile(pattern)
        for name, _, pattern in (spec.partition("=") for spec in args.figure)
    }
    seen: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}
    for round_no in range(args.rounds):
        shift = round_no % len(trees)
        for tree in trees[shift:] + trees[:shift]:
            run = subprocess.run(
                [sys.executable, *command], cwd=tree, capture_output=True, text=True, check=False
            )
            got = figures(run.stdout, extra)
            if not got:
                print(f"round {round_no + 1} {tree}: no GATE figure\n{run.stdout}{run.stderr}")
            for name, value in got.items():
                seen[tree].setdefault(name, []).append(value)
            print(f"round {round_no + 1} {tree}: {got}", flush=True)
    names = sorted({name for per_tree in seen.values() for name in per_tree})
    print(f"\nmedians of {args.rounds} alternating rounds: {' '.join(command)}")
    for name in names:
        first = statistics.median(seen[trees[0]].get(name) or [float("nan")])
        cells = []
        for tree in trees:
            values = seen[tree].get(name)
            value = statistics.median(values) if values else float("nan")
            cells.append(f"{tree}: {value:.2f} ({value / first:.2f}x)" if first else f"{value}")
        print(f"{name}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
