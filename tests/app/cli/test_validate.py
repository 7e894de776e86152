"""CLI: ``replay --validate`` and ``validate --kind KIND FILE`` (http-api.md, CLI output)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.cli.main import main
from providers.local_demo import LocalDemoProvider
from providers.testing import make_options, run_collect


async def _recording(tmp_path: Path, prompt: str = "think task") -> Path:
    events = await run_collect(
        LocalDemoProvider("demo", delay_ms=0), {"prompt": prompt}, options=make_options()
    )
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    return path


async def test_replay_validate_adds_validator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _recording(tmp_path)
    assert main(["replay", str(path), "--validate"]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["validator"] == []
    # drop the run terminal: the validator reports it, per run
    lines = path.read_text().splitlines()[:-1]
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path), "--validate"]) == 0
    out = orjson.loads(capsys.readouterr().out)
    codes = {issue["code"] for issue in out["validator"]}
    assert "missing_run_terminal" in codes
    assert {issue["runId"] for issue in out["validator"]} == {"run_test"}
    assert main(["replay", str(path)]) == 0
    assert "validator" not in orjson.loads(capsys.readouterr().out)


def test_validate_kind_native_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    path = asyncio.run(_recording(tmp_path, "search artifact"))
    assert main(["validate", "--kind", "agent-event", str(path)]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["issues"] == []
    assert out["events"] > 10
    assert next(iter(out["state"]["runs"].values()))["status"] == "completed"


def test_validate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--kind", "agent-event", str(tmp_path / "missing")]) == 2
    path = tmp_path / "x.jsonl"
    path.write_text("")
    assert main(["validate", "--kind", "nope", str(path)]) == 2
    assert "Unknown provider kind" in capsys.readouterr().err
