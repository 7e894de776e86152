"""``core.replay``: JSON Lines replay with line numbers."""

from __future__ import annotations

import json

import pytest

from core import EventFactory, ReplayStopped, entity_key, replay_jsonl


def _lines() -> list[str]:
    events = EventFactory("s", "r", now=lambda: 5)
    return [
        json.dumps(events.create("run.started", {})),
        json.dumps(events.create("message.started", {"messageId": "m", "role": "assistant"})),
        json.dumps(events.create("message.delta", {"messageId": "m", "delta": "hi"})),
        json.dumps(events.create("message.completed", {"messageId": "m"})),
        json.dumps(events.create("run.completed", {})),
    ]


def test_record_replay_reports_invalid_lines_and_issues() -> None:
    lines = _lines()
    orphan = EventFactory("s", "r").create("tool.running", {"toolCallId": "nope"}, sequence=99)
    head = [lines[0], "", "{not json", lines[1], '{"type":"run.started"}', lines[2], "  "]
    text = "\n".join([*head, lines[3], json.dumps(orphan), lines[4], "NaN", "[1]"])
    result = replay_jsonl(text + "\r\n")
    assert [entry["line"] for entry in result.invalid] == [3, 5, 11, 12]
    assert result.invalid[0]["error"].startswith("invalid JSON")
    assert result.invalid[1]["error"] == 'invalid AgentEvent: $.protocolVersion must be "0.1"'
    assert [issue["code"] for issue in result.issues] == ["missing_entity"]
    assert result.state["messages"][entity_key("r", "m")]["content"] == "hi"
    assert [m["status"] for m in result.messages] == ["success"]
    out = result.to_dict()
    assert list(out) == ["state", "issues", "messages", "invalid"]
    assert [number for number, _ in result.events] == [1, 4, 6, 8, 9, 10]


def test_strict_replay_stops_at_first_invalid_line() -> None:
    lines = _lines()
    with pytest.raises(ReplayStopped) as info:
        replay_jsonl("\n".join([lines[0], "oops", lines[1]]), strict=True)
    assert info.value.line == 2 and info.value.issue is None


def test_strict_replay_stops_at_first_issue() -> None:
    lines = _lines()
    with pytest.raises(ReplayStopped) as info:
        replay_jsonl("\n".join([lines[0], lines[2], lines[1]]), strict=True)
    assert info.value.line == 2
    assert info.value.issue is not None and info.value.issue["code"] == "missing_entity"
    assert "missing_entity" in str(info.value)


def test_strict_replay_of_a_clean_stream() -> None:
    result = replay_jsonl("\n".join(_lines()), strict=True)
    assert result.invalid == [] and result.issues == []


def test_line_separators_inside_strings_do_not_split_lines() -> None:
    event = EventFactory("s", "r").create("run.started", {"input": "a\u2028b\u0085c"})
    text = json.dumps(event, ensure_ascii=False)
    result = replay_jsonl(text)
    assert result.invalid == []
    assert result.state["runs"]["r"]["input"] == "a\u2028b\u0085c"


def test_lines_parse_like_json_parse() -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    start = json.dumps(factory.create("run.started", {"input": "x"}))
    surrogate = start.replace('"input": "x"', '"input": "\\ud800"')
    huge = json.dumps(factory.create("run.started", {}, sequence=5)).replace(
        '"timestamp": 1', '"timestamp": 1e400'
    )
    text = "\n".join([surrogate, "NaN", '{"a": Infinity}', huge, "\ufeff{}"])
    result = replay_jsonl(text)
    # A lone surrogate escape is accepted (JSON.parse does); NaN/Infinity literals are not JSON;
    # 1e400 parses (to Infinity) but makes the event invalid; a BOM is not JSON.
    assert result.state["runs"]["r"]["input"] == "\ud800"
    assert [(entry["line"], entry["error"].split(":")[0]) for entry in result.invalid] == [
        (2, "invalid JSON"),
        (3, "invalid JSON"),
        (4, "invalid AgentEvent"),
        (5, "invalid JSON"),
    ]
    assert "$.timestamp" in result.invalid[2]["error"]
