"""``bench/ab_trees.py`` runs benches against variants in alternating rounds, compares medians.

The fake bench's figure is the content of a file of the tree it runs in (times a factor from its
environment), and it logs which tree ran, so a swap of variants, a missed ``PYTHONPATH``, an
environment not passed or rounds not rotated fail these tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import ab_trees

FAKE_BENCH = """\
import os, sys
from pathlib import Path
import speedmod  # found through PYTHONPATH: the tree's own copy
here = Path(__file__).resolve().parent.parent
speed = float((here / "speed.txt").read_text())
assert speedmod.SPEED == speed, "PYTHONPATH does not point at this tree"
speed *= float(os.environ.get("FAKE_FACTOR", "1"))
with open(sys.argv[1], "a") as log:
    log.write(f"{speed:g}\\n")
print(f"GATE fake speed: {speed:.4g} (target >= 1) PASS")
print(f"GATE fake cost: {1 / speed:.4g} µs/event (target <= 9 µs/event) PASS")
print(f"| a table row | {speed * 10:g} | ms |")
print("GATE fake PASS")
"""


def _git(repo: Path, *args: str) -> str:
    git = ["git", "-C", str(repo), *args]
    return subprocess.run(git, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, speed: float) -> str:
    (repo / "speed.txt").write_text(f"{speed:g}\n")
    (repo / "speedmod.py").write_text(f"SPEED = {speed!r}\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"speed {speed}")
    return _git(repo, "rev-parse", "HEAD")


def _rows(out: str) -> dict[str, list[str]]:
    """The result table's rows by figure, each a list of stripped cells."""
    return {
        cells[0]: cells
        for line in out.splitlines()
        if " | " in line
        for cells in [[cell.strip() for cell in line.split(" | ")]]
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "bench").mkdir()
    (repo / "bench" / "fake_bench.py").write_text(FAKE_BENCH)
    return repo


def test_variants_alternate_in_a_rotating_order_and_their_medians_are_compared(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rev_a = _commit(repo, 2.0)
    rev_b = _commit(repo, 3.0)
    log = tmp_path / "order.log"
    argv = ["--repo", str(repo), "--variant", f"a={rev_a}", "--variant", f"b={rev_b}"]
    argv += ["--variant", f"b2={rev_b}:FAKE_FACTOR=2", "--rounds", "3"]
    assert ab_trees.main([*argv, "--", "bench/fake_bench.py", str(log)]) == 0
    # round 1: a, b, b2; round 2: b, b2, a; round 3: b2, a, b
    assert log.read_text().split() == ["2", "3", "6", "3", "6", "2", "6", "2", "3"]
    rows = _rows(capsys.readouterr().out)
    assert rows["figure"] == ["figure", "a", "b", "b2", "b ÷ a", "b2 ÷ a", "rounds"]
    assert rows["fake speed"] == ["fake speed", "2", "3", "6", "1.500", "3.000", "3/3/3"]
    assert rows["fake cost"] == ["fake cost", "0.5", "0.3333", "0.1667", "0.667", "0.333", "3/3/3"]


def test_a_figure_from_a_regex_and_a_worktree_directory(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rev_a = _commit(repo, 4.0)
    (repo / "speed.txt").write_text("5\n")
    (repo / "speedmod.py").write_text("SPEED = 5.0\n")
    log = tmp_path / "order.log"
    argv = ["--repo", str(repo), "--variant", f"old={rev_a}", "--variant", f"new={repo}"]
    argv += ["--rounds", "2", "--figure", r"row=^\| a table row \| (\S+)"]
    assert ab_trees.main([*argv, "--", "bench/fake_bench.py", str(log)]) == 0
    assert log.read_text().split() == ["4", "5", "5", "4"]
    rows = _rows(capsys.readouterr().out)
    assert rows["figure"] == ["figure", "old", "new", "new ÷ old", "rounds"]
    assert rows["fake speed"] == ["fake speed", "4", "5", "1.250", "2/2"]
    assert rows["row"] == ["row", "40", "50", "1.250", "2/2"]


def test_a_suite_runs_each_bench_of_it_per_variant(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rev = _commit(repo, 2.0)
    log = tmp_path / "order.log"
    suite = (
        ab_trees.Bench("bench/fake_bench.py", (str(log),)),
        ab_trees.Bench("bench/fake_bench.py", (str(log),), (("row", r"a table row \| (\S+)"),)),
    )
    monkeypatch.setitem(ab_trees.SUITES, "fake", suite)
    argv = ["--repo", str(repo), "--variant", f"x={rev}", "--variant", f"y={rev}:FAKE_FACTOR=3"]
    assert ab_trees.main([*argv, "--rounds", "1", "--suite", "fake"]) == 0
    assert log.read_text().split() == ["2", "2", "6", "6"]
    rows = _rows(capsys.readouterr().out)
    assert rows["row"] == ["row", "20", "60", "3.000", "1/1"]
    assert rows["fake speed"] == ["fake speed", "2", "6", "3.000", "2/2"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--variant", "a=HEAD", "--", "bench/x.py"],  # one variant
        ["--variant", "a=HEAD", "--variant", "b=HEAD"],  # no bench, no suite
        ["--variant", "a=HEAD", "--variant", "a=HEAD", "--", "bench/x.py"],  # same name
        ["--variant", "a=HEAD", "--variant", "b=HEAD:NOEQUALS", "--", "bench/x.py"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        ab_trees.main(argv)
    assert exit_.value.code == 2


def test_a_variant_spec_is_parsed() -> None:
    spec = ab_trees.parse_variant("public=HEAD:AGENT_GATEWAY_GATEWAY__FAST_PATHS=false,X=1")
    assert spec == ab_trees.VariantSpec(
        "public", "HEAD", {"AGENT_GATEWAY_GATEWAY__FAST_PATHS": "false", "X": "1"}
    )
    assert ab_trees.parse_variant("before=084b081") == ab_trees.VariantSpec("before", "084b081", {})


def test_every_headline_bench_of_the_suite_exists_and_takes_its_arguments() -> None:
    import subprocess as sp
    import sys

    root = Path(ab_trees.__file__).resolve().parent.parent
    for bench in ab_trees.HEADLINE:
        script = root / bench.script
        assert script.is_file(), bench.script
        # --help parses the options: an unknown one in the suite would fail the real run
        done = sp.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        options = {arg for arg in bench.args if arg.startswith("--")}
        missing = {opt for opt in options if opt not in done.stdout}
        assert not missing, (bench.script, missing)


def test_gate_lines_are_the_figures() -> None:
    output = "\n".join(
        [
            "some table",
            "GATE figure1 burst=1 gateway/normalizer events/s: 3.214 (target >= 2) PASS",
            "GATE figure1 burst=1 gateway CPU: 12.5 µs/event (target <= 40 µs/event) FAIL",
            "GATE figure1 memory: not measured (target <= 50) FAIL",
            "GATE figure1 FAIL",
            "SUMMARY figure1 ratio 3.2 PASS",
        ]
    )
    assert ab_trees.parse_figures(output) == {
        "figure1 burst=1 gateway/normalizer events/s": 3.214,
        "figure1 burst=1 gateway CPU": 12.5,
    }
    extra = (("ratio", r"^SUMMARY figure1 ratio (\S+)"), ("absent", r"^NOPE (\S+)"))
    assert ab_trees.parse_figures(output, extra)["ratio"] == 3.2
    assert "absent" not in ab_trees.parse_figures(output, extra)
