"""A/B of the compat modules' fast paths: one bench, run in alternating rounds with
``[gateway] fast_paths`` on and off (``AGENT_GATEWAY_GATEWAY__FAST_PATHS=false``) in this tree,
and optionally with the tree of another checkout (``--base``, fast paths as that tree has them).

Each round runs the bench once per variant, in a rotating order; the bench's ``SUMMARY`` line
(or the last line matching ``--line REGEX``) is kept, and the table shows, per variant, the
median over the rounds of each number of that line (in the line's order).

Usage: ``.venv/bin/python bench/fast_paths_ab.py [--rounds 5] [--base /path/to/tree]
throughput_bench.py --chunks 5000 --rounds 1``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def run(
    tree: Path, bench: list[str], fast_paths: bool, path: str = "", line: str = "^SUMMARY"
) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), path) if p)}
    if not fast_paths:
        env["AGENT_GATEWAY_GATEWAY__FAST_PATHS"] = "false"
    else:
        env.pop("AGENT_GATEWAY_GATEWAY__FAST_PATHS", None)
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / bench[0]), *bench[1:]],
        env=env,
        cwd=str(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [out for out in done.stdout.splitlines() if re.search(line, out)]
    if not lines:
        raise RuntimeError(
            f"{bench[0]} printed no line matching {line!r}:\n{done.stdout}\n{done.stderr}"
        )
    return lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", type=Path, default=None, help="another tree (fast paths on)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="one more variant, fast paths on, DIR added to PYTHONPATH (e.g. a sitecustomize.py "
        "that forces one package's check to fail)",
    )
    parser.add_argument(
        "--line", default="^SUMMARY", help="the line of the bench's output kept (a regex)"
    )
    parser.add_argument("bench", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    variants: list[tuple[str, Path, bool, str]] = [("on", ROOT, True, ""), ("off", ROOT, False, "")]
    if args.base is not None:
        variants.insert(0, ("base", args.base.resolve(), True, ""))
    for variant in args.variant:
        name, _, path = variant.partition("=")
        variants.append((name, ROOT, True, path))
    lines: dict[str, list[str]] = {name: [] for name, _, _, _ in variants}
    for round_ in range(args.rounds):
        shift = round_ % len(variants)
        for name, tree, fast, path in variants[shift:] + variants[:shift]:
            line = run(tree, args.bench, fast, path, args.line)
            lines[name].append(line)
            print(f"round {round_ + 1} {name}: {line}", flush=True)
    print(f"\n{' '.join(args.bench)}: medians over {args.rounds} rounds")
    for name, _, _, _ in variants:
        numbers = [[float(n) for n in NUMBER.findall(line)] for line in lines[name]]
        width = min(len(row) for row in numbers)
        medians = [statistics.median(row[i] for row in numbers) for i in range(width)]
        print(f"{name:>5}: " + " ".join(f"{m:g}" for m in medians))
    print(f"(the numbers of: {lines[variants[0][0]][0]})")


if __name__ == "__main__":
    main()
