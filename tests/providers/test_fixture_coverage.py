"""Every recorded file of a dialect that has a provider is replayed by some test.

The replay modules each expose ``replayed_files()``; a fixture file of ``openai-chat/``,
``anthropic/`` or ``ag-ui/`` missing from their union fails this test (documentation files
``*.md`` aside). ``openai-responses/`` has no provider yet and is outside the rule."""

from __future__ import annotations

from pathlib import Path

from tests.providers import test_ag_ui_replay, test_anthropic_replay, test_openai_chat_replay
from tests.providers.replay_helpers import FIXTURES

DIALECTS = ("openai-chat", "anthropic", "ag-ui")


def recorded_files() -> set[Path]:
    files: set[Path] = set()
    for dialect in DIALECTS:
        files |= {p for p in (FIXTURES / dialect).rglob("*") if p.is_file() and p.suffix != ".md"}
    return files


def replayed() -> set[Path]:
    out = {FIXTURES / "openai-chat" / n for n in test_openai_chat_replay.replayed_files()}
    out |= {FIXTURES / "anthropic" / n for n in test_anthropic_replay.replayed_files()}
    out |= set(test_ag_ui_replay.replayed_files())
    return {p.resolve() for p in out}


def test_fixtures_are_there() -> None:
    files = recorded_files()
    assert len([f for f in files if "openai-chat" in f.parts]) == 16
    assert len([f for f in files if "anthropic" in f.parts]) == 16


def test_every_recorded_file_is_replayed() -> None:
    missing = sorted(
        str(p.relative_to(FIXTURES)) for p in recorded_files() if p.resolve() not in replayed()
    )
    assert missing == []


def test_replayed_files_exist() -> None:
    assert [p for p in replayed() if not p.is_file()] == []
