"""``agent-gateway replay``: output and exit codes of http-api.md "CLI output"."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main
from core import EventFactory


def _stream() -> list[str]:
    events = EventFactory("s", "r", now=lambda: 7)
    return [
        json.dumps(events.create("run.started", {"input": {"prompt": "hi"}})),
        json.dumps(events.create("message.started", {"messageId": "m", "role": "assistant"})),
        json.dumps(events.create("message.delta", {"messageId": "m", "delta": "hello"})),
        json.dumps(events.create("message.completed", {"messageId": "m"})),
        json.dumps(events.create("run.completed", {"output": "ok"})),
    ]


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_replay_file_prints_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _stream()
    path = _write(tmp_path, [lines[0], "garbage", lines[1], lines[2], lines[3], lines[4]])
    assert main(["replay", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.count("\n") == 1
    data = json.loads(out)
    assert list(data) == ["state", "issues", "messages", "invalid"]
    assert data["issues"] == []
    assert data["invalid"] == [{"line": 2, "error": data["invalid"][0]["error"]}]
    assert data["invalid"][0]["error"].startswith("invalid JSON")
    assert [(m["id"], m["status"]) for m in data["messages"]] == [("1:rm", "success")]
    assert data["state"]["messages"]["1:rm"]["content"] == "hello"
    assert data["state"]["runs"]["r"]["output"] == "ok"


def test_replay_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(_stream())))
    assert main(["replay", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["invalid"] == [] and data["state"]["runs"]["r"]["status"] == "completed"


def test_record_mode_keeps_issues_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _stream()
    path = _write(tmp_path, [lines[0], lines[2]])  # delta before its message
    assert main(["replay", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [issue["code"] for issue in data["issues"]] == ["missing_entity"]
    assert data["state"]["issues"] == data["issues"]


def test_strict_exits_1_at_first_issue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _stream()
    path = _write(tmp_path, [lines[0], lines[2], lines[1]])
    assert main(["replay", "--strict", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "line 2" in err and "missing_entity" in err


def test_strict_exits_1_at_first_invalid_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _stream()
    path = _write(tmp_path, [lines[0], '{"protocolVersion":"0.1"}', lines[1]])
    assert main(["replay", str(path), "--strict"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "line 2" in err and "$.type" in err


def test_strict_clean_stream_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--strict", str(_write(tmp_path, _stream()))]) == 0
    assert json.loads(capsys.readouterr().out)["issues"] == []


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["replay", str(binary)]) == 2
    assert main(["replay", str(tmp_path)]) == 2  # a directory


def test_no_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "replay" in capsys.readouterr().err


def test_console_process_never_prints_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, ["{", "[]", '"x"', "1e999999", '{"a":' * 50, _stream()[0]])
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert [entry["line"] for entry in data["invalid"]] == [1, 2, 3, 4, 5]
    assert list(data["state"]["runs"]) == ["r"]


def test_lone_surrogates_and_huge_numbers_are_printed_as_json(tmp_path: Path) -> None:
    start = _stream()[0].replace('"prompt": "hi"', '"prompt": "\\ud800", "n": 1e400')
    path = _write(tmp_path, [start])
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Infinity" not in proc.stdout
    data = json.loads(proc.stdout)
    assert data["state"]["runs"]["r"]["input"] == {"prompt": "\ud800", "n": None}
    assert data["invalid"] == []
