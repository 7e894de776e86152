r"""Benches run against several variants side by side, in alternating rounds; the medians compared.

A variant is ``NAME=TREE[:ENV=VAL,...]``: ``TREE`` a git revision (exported with ``git
archive`` to a temporary directory, no worktree made) or a directory taken as is (a worktree
with uncommitted changes), and environment variables set for its runs (e.g.
``public=HEAD:AGENT_GATEWAY_GATEWAY__FAST_PATHS=false``: the same tree with every public
path). Each round runs every bench once per variant, the order of the variants rotating one
step each round, so load on the shared machine falls on all of them alike.

**Whose code runs.** Each variant runs its *own copy* of the bench script
(``TREE/bench/...``), with ``TREE`` as the working directory and first on ``PYTHONPATH``: the
bench's harness, the gateway processes it starts (``bench/harness/procs.py`` starts them from
the tree the harness lies in) and the ``app`` they import are that tree's. This venv's
interpreter and packages serve every variant. The benches of the suite take the same arguments
in the tree before issue 50 (``084b081``) as now; where a figure is printed only on a
``SUMMARY`` line there (figure 5's memory, the capacities), the suite reads it from that line
under the same name, so the old tree is compared too.

**Figures** are the numbers of the ``GATE <bench> <target>: <value> …`` lines
(``bench/harness/gate.py``), plus any ``--figure NAME=REGEX`` (the first group of the regex's
last match in the output). The table gives, per figure, the median over each variant's rounds
and each variant ÷ the first. A run that exits non-zero (a missed target) still counts.

Usage::

    .venv/bin/python bench/ab_trees.py --variant before=084b081 --variant after=HEAD \
        --rounds 5 -- bench/throughput_bench.py --chunks 2000
    .venv/bin/python bench/ab_trees.py --variant before=084b081 --variant after=HEAD \
        --variant public=HEAD:AGENT_GATEWAY_GATEWAY__FAST_PATHS=false --rounds 5 --suite headline

``--suite headline`` runs every headline bench of ``BENCHMARKS.md`` that is short enough
(figures 1–6, capacity in two steps, archive, core, the in-process abort; not the peer, the
soak or the container) with small sizes: one variant's round takes 3–5 minutes on the shared
2-core machine, most of it starting processes (``BENCHMARKS.md``, "Trees side by side").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
GATE_LINE = re.compile(r"^GATE (?P<name>\S+ [^:]+): (?P<value>[-+0-9.eE]+)\S*[^(]*\(target")
NUMBER = r"(-?[0-9.]+)"


@dataclass(frozen=True)
class Bench:
    """One bench of a suite: its script (relative to a tree), arguments and extra figures."""

    script: str
    args: tuple[str, ...] = ()
    figures: tuple[tuple[str, str], ...] = ()


#: The headline benches with short sizes (``--suite headline``). Figure 5 and the capacities
#: also read from the ``SUMMARY`` line, which the tree before issue 50 prints too.
HEADLINE: tuple[Bench, ...] = (
    Bench("bench/throughput_bench.py", ("--chunks", "3000", "--rounds", "1")),
    Bench("bench/fanout_bench.py", ("--ks", "1,500", "--chunks", "300", "--delay", "2")),
    Bench("bench/ttfe_bench.py", ("--rounds", "10")),
    Bench("bench/gateway_abort_bench.py", ("--runs", "4")),
    Bench(
        "bench/memory_bench.py",
        ("--conversations", "50", "--events", "3000"),
        (
            ("figure5 RSS per idle conversation", rf"^SUMMARY figure5 per_conversation={NUMBER}"),
            ("figure5 RSS growth of a run", rf"^SUMMARY figure5 .*run_growth={NUMBER}"),
            ("figure5 stalled extra peak", rf"^SUMMARY figure5 .*stalled_extra_peak={NUMBER}"),
            (
                "figure5 stalled extra after close",
                rf"^SUMMARY figure5 .*stalled_extra_after_close={NUMBER}",
            ),
        ),
    ),
    Bench(
        "bench/redis_ratio_bench.py",
        ("--rounds", "1", "--chunks", "2000", "--ks", "50", "--fan-chunks", "200", "--delay", "2"),
    ),
    Bench(
        "bench/capacity_bench.py",
        ("--deltas", "40", "--cs", "20,40"),
        (
            ("capacity memory C", rf"^SUMMARY capacity .*memory C = {NUMBER}"),
            ("capacity redis C", rf"^SUMMARY capacity .*redis C = {NUMBER}"),
            ("capacity normalizer C", rf"^SUMMARY capacity .*normalizer C = {NUMBER}"),
        ),
    ),
    Bench(
        "bench/archive_bench.py",
        ("--rounds", "1", "--conversations", "50", "--chunks", "1000"),
    ),
    Bench("bench/core_bench.py", ("--events", "20000", "--repeats", "2")),
    Bench("bench/abort_bench.py", ("--runs", "5")),
)

SUITES: dict[str, tuple[Bench, ...]] = {"headline": HEADLINE}


def parse_figures(output: str, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, float]:
    """The figures of one run: ``{"<bench> <target>": value}`` from its ``GATE`` lines, and
    ``{NAME: value}`` for each ``(NAME, REGEX)`` of ``extra`` (its last match's first group)."""
    figures: dict[str, float] = {}
    lines = output.splitlines()
    for line in lines:
        match = GATE_LINE.match(line.strip())
        if match is None:
            continue
        try:
            figures[match["name"]] = float(match["value"])
        except ValueError:
            continue
    for name, pattern in extra:
        hits = [hit for line in lines if (hit := re.search(pattern, line)) is not None]
        if hits:
            try:
                figures[name] = float(hits[-1][1])
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


@dataclass(frozen=True)
class VariantSpec:
    name: str
    tree: str
    env: dict[str, str]


def parse_variant(spec: str) -> VariantSpec:
    """``NAME=TREE[:ENV=VAL,...]`` (a revision or directory, then the variant's environment)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"a variant is NAME=TREE[:ENV=VAL,...], not {spec!r}")
    tree, _, env_part = rest.partition(":")
    env: dict[str, str] = {}
    for item in filter(None, env_part.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{spec!r}: an environment setting is ENV=VAL, not {item!r}")
        env[key] = value
    return VariantSpec(name, tree, env)


@dataclass
class Variant:
    name: str
    tree: Path
    env: dict[str, str]
    runs: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)

    def run(self, bench: Bench, timeout: float | None) -> None:
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.tree), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        command = [sys.executable, str(self.tree / bench.script), *bench.args]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=self.tree, env=env, capture_output=True, text=True, timeout=timeout
            )
            out, err, code = done.stdout, done.stderr, str(done.returncode)
        except subprocess.TimeoutExpired as expired:
            out = _text(expired.stdout)
            err = _text(expired.stderr)
            code = f"timeout {timeout:g} s"
        took = time.monotonic() - started
        self.seconds.append(took)
        figures = parse_figures(out, bench.figures)
        self.runs.setdefault(bench.script, []).append(figures)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in figures.items()) or "no figure"
        print(f"  {self.name} {bench.script}: exit {code}, {took:.0f} s; {shown}", flush=True)
        if not figures:
            sys.stderr.write(out[-2000:] + err[-2000:])

    def values(self, figure: str) -> list[float]:
        return [run[figure] for runs in self.runs.values() for run in runs if figure in run]


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def table(variants: list[Variant]) -> str:
    """Per figure: each variant's median, then each variant ÷ the first, and the rounds."""
    names = list(
        dict.fromkeys(k for v in variants for runs in v.runs.values() for run in runs for k in run)
    )
    first = variants[0]
    header = ["figure", *(f"{v.name}" for v in variants)]
    header += [f"{v.name} ÷ {first.name}" for v in variants[1:]]
    header.append("rounds")
    rows = [header]
    for name in names:
        medians = [median(vals) if (vals := v.values(name)) else None for v in variants]
        base = medians[0]
        row = [name, *(f"{m:.4g}" if m is not None else "-" for m in medians)]
        row += [f"{m / base:.3f}" if base and m is not None else "-" for m in medians[1:]]
        row.append("/".join(str(len(v.values(name))) for v in variants))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    cut = args_in.index("--") if "--" in args_in else len(args_in)
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=TREE[:ENV=VAL,...]",
        help="a revision or directory, and environment for its runs (at least two; the first "
        "is the one the others are divided by)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds (each runs every variant)")
    parser.add_argument("--suite", choices=sorted(SUITES), help="a suite instead of `-- BENCH…`")
    parser.add_argument(
        "--figure",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="also a figure: the first group of REGEX's last match in the output",
    )
    parser.add_argument("--repo", type=Path, default=REPO, help="git repository of the revisions")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per bench run")
    args = parser.parse_args(args_in[:cut])
    command = args_in[cut + 1 :]
    if len(args.variant) < 2:
        parser.error("at least two --variant are needed")
    if args.rounds < 1:
        parser.error("--rounds >= 1")
    if bool(command) == bool(args.suite):
        parser.error("either --suite NAME or `-- BENCH.py ARGS…`")
    try:
        specs = [parse_variant(spec) for spec in args.variant]
    except ValueError as error:
        parser.error(str(error))
    if len({s.name for s in specs}) != len(specs):
        parser.error("variant names must differ")
    extra = tuple((n, p) for n, _, p in (f.partition("=") for f in args.figure))
    if args.suite:
        benches = tuple(Bench(b.script, b.args, b.figures + extra) for b in SUITES[args.suite])
    else:
        benches = (Bench(command[0], tuple(command[1:]), extra),)
    with tempfile.TemporaryDirectory(prefix="ab-trees-") as tmp:
        exported: dict[str, Path] = {}
        variants: list[Variant] = []
        for spec in specs:
            path = Path(spec.tree)
            if path.is_dir():
                tree = path.resolve()
            elif spec.tree in exported:
                tree = exported[spec.tree]
            else:
                tree = export(args.repo, spec.tree, Path(tmp) / f"tree{len(exported)}")
                exported[spec.tree] = tree
            variants.append(Variant(spec.name, tree, spec.env))
            env = " ".join(f"{k}={v}" for k, v in spec.env.items())
            print(f"{spec.name} = {spec.tree} ({tree}) {env}".rstrip(), flush=True)
        for round_no in range(args.rounds):
            shift = round_no % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                started = time.monotonic()
                print(f"round {round_no + 1} {variant.name}:", flush=True)
                for bench in benches:
                    variant.run(bench, args.timeout)
                took = time.monotonic() - started
                print(f"round {round_no + 1} {variant.name}: {took:.0f} s", flush=True)
    print(table(variants))
    return 0 if all(v.runs and any(any(r) for r in v.runs.values()) for v in variants) else 1


if __name__ == "__main__":
    sys.exit(main())
