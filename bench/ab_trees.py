"""Run one bench against two source trees, side by side: A, B, A, B, … and compare the medians.

Each tree is a git revision exported (``git archive``) to a temporary directory, or a directory
given as is (a worktree with uncommitted changes). The bench command runs in each tree with
``PYTHONPATH`` set to it, in this same venv, alternating A and B ``--rounds`` times each, so load
on the machine falls on both alike. Every ``GATE`` line a run prints
(``bench/harness/gate.py``: ``GATE <bench> <target>: <value> (target …) PASS``) is a figure; the
table gives, per figure, the median over A's rounds, over B's, and B ÷ A.

Usage::

    .venv/bin/python bench/ab_trees.py --a main --b HEAD --rounds 5 -- \\
        bench/throughput_bench.py --chunks 2000

A command starting with a ``.py`` path runs with this interpreter, the path taken inside each
tree. A run that exits non-zero (a missed target) still counts its figures; its code is shown.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
GATE_LINE = re.compile(r"^GATE (?P<name>\S+ [^:]+): (?P<value>[-+0-9.eE]+)\S*[^(]*\(target")


def parse_figures(output: str) -> dict[str, float]:
    """The figures of one run: ``{"<bench> <target>": value}`` from its ``GATE`` lines."""
    figures: dict[str, float] = {}
    for line in output.splitlines():
        match = GATE_LINE.match(line.strip())
        if match is None:
            continue
        try:
            figures[match["name"]] = float(match["value"])
        except ValueError:
            continue
    return figures


def export(repo: Path, rev: str, dest: Path) -> Path:
    """``rev`` of ``repo`` as plain files under ``dest`` (``git archive``, no worktree made)."""
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def tree_for(repo: Path, spec: str, dest: Path) -> Path:
    """A directory given as is, or a revision exported to ``dest``."""
    path = Path(spec)
    if path.is_dir():
        return path.resolve()
    return export(repo, spec, dest)


def command_in(tree: Path, command: list[str]) -> list[str]:
    if command and command[0].endswith(".py"):
        return [sys.executable, str(tree / command[0]), *command[1:]]
    return command


@dataclass
class Side:
    label: str
    tree: Path
    runs: list[dict[str, float]] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)

    def run(self, command: list[str], timeout: float | None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.tree), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        done = subprocess.run(
            command_in(self.tree, command),
            cwd=self.tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.runs.append(parse_figures(done.stdout))
        self.codes.append(done.returncode)
        figures = ", ".join(f"{k} {v:.4g}" for k, v in self.runs[-1].items()) or "no figure"
        print(f"{self.label} round {len(self.runs)}: exit {done.returncode}; {figures}", flush=True)
        if not self.runs[-1]:
            sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])

    def values(self, figure: str) -> list[float]:
        return [run[figure] for run in self.runs if figure in run]


def table(a: Side, b: Side) -> str:
    """figure, median A, median B, B ÷ A, rounds (A/B) — one row per figure either side has."""
    names = list(dict.fromkeys(k for run in [*a.runs, *b.runs] for k in run))
    rows = [("figure", "median A", "median B", "B ÷ A", "rounds")]
    for name in names:
        va, vb = a.values(name), b.values(name)
        ma = median(va) if va else None
        mb = median(vb) if vb else None
        ratio = f"{mb / ma:.3f}" if ma and mb is not None else "-"
        rows.append((
            name,
            f"{ma:.4g}" if ma is not None else "-",
            f"{mb:.4g}" if mb is not None else "-",
            ratio,
            f"{len(va)}/{len(vb)}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--" not in args_in:
        sys.stderr.write("ab_trees: the bench command follows `--`\n")
        return 2
    cut = args_in.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", required=True, help="revision (or directory) A")
    parser.add_argument("--b", required=True, help="revision or worktree directory B")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per tree")
    parser.add_argument("--repo", type=Path, default=REPO, help="git repository of the revisions")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    args = parser.parse_args(args_in[:cut])
    command = args_in[cut + 1 :]
    if not command or args.rounds < 1:
        parser.error("a bench command and --rounds >= 1 are needed")
    with tempfile.TemporaryDirectory(prefix="ab-trees-") as tmp:
        a = Side("A", tree_for(args.repo, args.a, Path(tmp) / "a"))
        b = Side("B", tree_for(args.repo, args.b, Path(tmp) / "b"))
        print(f"A = {args.a} ({a.tree})\nB = {args.b} ({b.tree})", flush=True)
        for _ in range(args.rounds):
            a.run(command, args.timeout)
            b.run(command, args.timeout)
    print(table(a, b))
    return 0 if any(a.runs) and any(b.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
