"""``bench/ab_trees.py`` runs a bench against two trees, alternating A and B, and compares medians.

The fake bench's figure is the content of a file of the tree it runs in, and it logs which tree
ran, so a swap of A and B, a missed ``PYTHONPATH`` or runs not alternated fail these tests.
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
with open(sys.argv[1], "a") as log:
    log.write(f"{speed:g}\\n")
print(f"GATE fake speed: {speed:.4g} (target >= 1) PASS")
print(f"GATE fake cost: {1 / speed:.4g} µs/event (target <= 9 µs/event) PASS")
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


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "bench").mkdir()
    (repo / "bench" / "fake_bench.py").write_text(FAKE_BENCH)
    return repo


def test_a_and_b_alternate_and_their_medians_are_compared(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rev_a = _commit(repo, 2.0)
    rev_b = _commit(repo, 3.0)
    log = tmp_path / "order.log"
    argv = ["--repo", str(repo), "--a", rev_a, "--b", rev_b, "--rounds", "3"]
    assert ab_trees.main([*argv, "--", "bench/fake_bench.py", str(log)]) == 0
    assert log.read_text().split() == ["2", "3", "2", "3", "2", "3"]
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip(): line.split(" | ") for line in out.splitlines()}
    speed = [cell.strip() for cell in rows["fake speed"]]
    assert speed == ["fake speed", "2", "3", "1.500", "3/3"]
    cost = [cell.strip() for cell in rows["fake cost"]]
    assert cost == ["fake cost", "0.5", "0.3333", "0.667", "3/3"]


def test_b_may_be_a_worktree_directory_with_uncommitted_changes(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rev_a = _commit(repo, 4.0)
    (repo / "speed.txt").write_text("5\n")
    (repo / "speedmod.py").write_text("SPEED = 5.0\n")
    log = tmp_path / "order.log"
    argv = ["--repo", str(repo), "--a", rev_a, "--b", str(repo), "--rounds", "2"]
    assert ab_trees.main([*argv, "--", "bench/fake_bench.py", str(log)]) == 0
    assert log.read_text().split() == ["4", "5", "4", "5"]
    assert "fake speed | 4        | 5        | 1.250 | 2/2" in capsys.readouterr().out


def test_gate_lines_are_the_figures() -> None:
    output = "\n".join([
        "some table",
        "GATE figure1 burst=1 gateway/normalizer events/s: 3.214 (target >= 2) PASS",
        "GATE figure1 burst=1 gateway CPU: 12.5 µs/event (target <= 40 µs/event) FAIL",
        "GATE figure1 memory: not measured (target <= 50) FAIL",
        "GATE figure1 FAIL",
        "SUMMARY figure1 ratio 3.2 PASS",
    ])
    assert ab_trees.parse_figures(output) == {
        "figure1 burst=1 gateway/normalizer events/s": 3.214,
        "figure1 burst=1 gateway CPU": 12.5,
    }
