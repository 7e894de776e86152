"""``run_all.py`` (``make bench``) fails when any bench missed a target, and runs every bench
that has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import run_all
from bench.harness.gate import EXIT_NOT_MEASURED


def _bench(tmp_path: Path, name: str, code: int, summary: str) -> run_all.Bench:
    script = tmp_path / f"{name}.py"
    script.write_text(f"import sys\nprint({summary!r})\nsys.exit({code})\n")
    return run_all.Bench(script, ["--full"], ["--quick"])


def _run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str, **benches: run_all.Bench
) -> int:
    monkeypatch.setattr(run_all, "BENCHES", benches)
    return run_all.main([*args, "--out", str(tmp_path / "out.txt")])


def test_every_bench_passing_passes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ok = _bench(tmp_path, "ok", 0, "SUMMARY ok PASS")
    assert _run(monkeypatch, tmp_path, a=ok, b=ok) == 0
    assert "run_all: 2 benches, 0 failed" in (tmp_path / "out.txt").read_text()


def test_a_bench_that_missed_a_target_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ok = _bench(tmp_path, "ok", 0, "SUMMARY ok PASS")
    missed = _bench(tmp_path, "missed", 1, "SUMMARY missed FAIL")
    assert _run(monkeypatch, tmp_path, a=ok, b=missed) == 1
    assert _run(monkeypatch, tmp_path, "--quick", a=ok, b=missed) == 1
    assert "RESULT b: FAIL" in (tmp_path / "out.txt").read_text()


def test_a_summary_saying_fail_fails_even_with_exit_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    said = _bench(tmp_path, "said", 0, "SUMMARY said p99=139 ms (target <= 100) FAIL")
    assert _run(monkeypatch, tmp_path, a=said) == 1


def test_a_crashed_bench_fails_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    crashed = _bench(tmp_path, "crashed", 2, "no summary")
    assert _run(monkeypatch, tmp_path, "--quick", a=crashed) == 1


def test_an_unmeasured_target_fails_a_full_run_not_a_quick_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    partial = _bench(tmp_path, "partial", EXIT_NOT_MEASURED, "SUMMARY partial NOT MEASURED")
    assert _run(monkeypatch, tmp_path, a=partial) == 1
    assert _run(monkeypatch, tmp_path, "--quick", a=partial) == 0
    assert "not gated" in (tmp_path / "out.txt").read_text()


def test_the_quick_and_full_sizes_go_to_each_bench(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = tmp_path / "echo.py"
    script.write_text("import sys\nprint('SUMMARY args', *sys.argv[1:])\n")
    echo = run_all.Bench(script, ["--full"], ["--quick"])
    assert _run(monkeypatch, tmp_path, a=echo) == 0
    assert "SUMMARY args --full" in (tmp_path / "out.txt").read_text()
    assert _run(monkeypatch, tmp_path, "--quick", a=echo) == 0
    assert "SUMMARY args --quick" in (tmp_path / "out.txt").read_text()


def test_every_bench_with_a_target_is_run() -> None:
    scripts = {bench.script.name: bench for bench in run_all.BENCHES.values()}
    for name in (
        "throughput_bench.py",
        "fanout_bench.py",
        "ttfe_bench.py",
        "ttfe_delay_bench.py",
        "gateway_abort_bench.py",
        "memory_bench.py",
        "redis_ratio_bench.py",
        "peer_bench.py",
        "core_bench.py",
        "abort_bench.py",
        "mcp_abort_bench.py",
        "capacity_bench.py",
        "archive_bench.py",
        "cluster_bench.py",
        "soak.py",
    ):
        assert name in scripts, name
        assert scripts[name].script.is_file()
    soak = scripts["soak.py"].full
    assert soak[soak.index("--duration") + 1] == "120"
    assert soak[soak.index("--redis-restarts") + 1] == "1"
