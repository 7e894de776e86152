"""``agent-gateway validate --kind KIND FILE`` over recorded streams of every model dialect."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.cli.main import main
from tests.providers.support.replay_helpers import FIXTURES


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["validate", *argv])
    out = capsys.readouterr().out
    return code, orjson.loads(out) if out.strip() else {}


def texts(state: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in state["messages"].values() if m["role"] == "assistant"]


def test_openai_jsonl_recording(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(
        capsys,
        "--kind",
        "openai-chat",
        str(FIXTURES / "openai-chat" / "mistral-reasoning.chunks.txt"),
    )
    assert code == 0 and out["issues"] == []
    assert set(out) == {"events", "issues", "state"}
    assert texts(out["state"]) == ["2 + 2 = 4"]
    assert [r["status"] for r in out["state"]["runs"].values()] == ["completed"]
    assert out["events"] == len(out["state"]["processedEventIds"])


def test_anthropic_concatenated_recording_plays_every_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FIXTURES / "anthropic" / "anthropic-tool-search-deferred-bm25.chunks.txt"
    code, out = run_cli(capsys, "--kind", "anthropic-messages", str(path))
    assert code == 0 and out["issues"] == []
    assert len(texts(out["state"])) == 3
    tools = {t["name"]: t["status"] for t in out["state"]["toolCalls"].values()}
    assert tools == {
        "readNoteTree": "completed",
        "tool_search_tool_bm25": "completed",
        "executeEditorOperation": "completed",
    }


def test_recording_exhausted_while_waiting_cancels(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "anthropic" / "tool_use_response.txt"
    code, out = run_cli(capsys, "--kind", "anthropic-messages", str(path))
    assert code == 0 and out["issues"] == []
    assert [r["status"] for r in out["state"]["runs"].values()] == ["cancelled"]


def test_agui_interrupt_recording(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "ag-ui" / "ag-ui-validate" / "valid" / "human-in-the-loop.jsonl"
    code, out = run_cli(capsys, "--kind", "ag-ui", str(path))
    assert code == 0 and out["issues"] == []
    assert [a["decision"] for a in out["state"]["approvals"].values()] == ["approved"]
    assert texts(out["state"])[-1] == "Done — 3 files deleted."


def test_agui_invalid_recording_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    path = (
        FIXTURES
        / "ag-ui"
        / "ag-ui-validate"
        / "invalid"
        / "AGUI101-content-without-start"
        / "stream.jsonl"
    )
    code, out = run_cli(capsys, "--kind", "ag-ui", str(path))
    assert code == 0 and out["issues"] == []
    (run,) = out["state"]["runs"].values()
    assert run["status"] == "failed" and run["error"]["code"] == "upstream_protocol_error"


def test_unreadable_file_and_unknown_kind(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    assert main(["validate", "--kind", "openai-chat", str(tmp_path / "missing.txt")]) == 2
    existing = FIXTURES / "anthropic" / "basic_response.txt"
    assert main(["validate", "--kind", "no-such-kind", str(existing)]) == 2


def test_agui_line_that_is_not_json_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    path = (
        FIXTURES
        / "ag-ui"
        / "ag-ui-validate"
        / "invalid"
        / "AGUI502-payload-not-json"
        / "stream.jsonl"
    )
    code, out = run_cli(capsys, "--kind", "ag-ui", str(path))
    assert code == 0 and out["issues"] == []
    (run,) = out["state"]["runs"].values()
    assert run["error"]["details"]["rule"] == "AGUI502"


def test_openai_responses_tool_loop_recording_plays_every_response(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FIXTURES / "openai-responses" / "openai-reasoning-encrypted-content.1.chunks.txt"
    code, out = run_cli(capsys, "--kind", "openai-responses", str(path))
    assert code == 0 and out["issues"] == []
    (run,) = out["state"]["runs"].values()
    assert run["status"] == "completed" and run["output"]["stopReason"] == "completed"
    assert [t["status"] for t in out["state"]["toolCalls"].values()] == ["completed"] * 3
    assert texts(out["state"]) == ["The final result is **570**."]
    printed = orjson.dumps(out).decode()
    assert "encrypted_content" not in printed and "gAAAAA" not in printed  # Fernet tokens


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("openai-node-ResponseStream.standard-text.sse", "completed"),
        ("openai-error.1.chunks.txt", "failed"),
        ("openai-client-tool-search.2.chunks.txt", "cancelled"),  # ends waiting on the app
    ],
)
def test_openai_responses_recordings(
    capsys: pytest.CaptureFixture[str], name: str, status: str
) -> None:
    code, out = run_cli(
        capsys, "--kind", "openai-responses", str(FIXTURES / "openai-responses" / name)
    )
    assert code == 0 and out["issues"] == []
    assert [r["status"] for r in out["state"]["runs"].values()] == [status]
