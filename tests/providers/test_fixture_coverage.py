"""Every recorded file of a dialect that has a provider is replayed by some test.

``tests.providers.support.replay_cases`` lists what the replay tests replay; a fixture file of
``openai-chat/``, ``openai-responses/``, ``anthropic/`` or ``ag-ui/`` missing from it fails this
test (documentation files ``*.md`` aside)."""

from __future__ import annotations

from pathlib import Path

from tests.providers.support.replay_cases import replayed_files
from tests.providers.support.replay_helpers import FIXTURES

DIALECTS = ("openai-chat", "openai-responses", "anthropic", "ag-ui")


def recorded_files() -> set[Path]:
    files: set[Path] = set()
    for dialect in DIALECTS:
        files |= {p for p in (FIXTURES / dialect).rglob("*") if p.is_file() and p.suffix != ".md"}
    return files


def test_fixtures_are_there() -> None:
    files = recorded_files()
    assert len([f for f in files if "openai-chat" in f.parts]) == 16
    assert len([f for f in files if "openai-responses" in f.parts]) == 8
    assert len([f for f in files if "anthropic" in f.parts]) == 16


def test_every_recorded_file_is_replayed() -> None:
    replayed = replayed_files()
    missing = sorted(
        str(p.relative_to(FIXTURES)) for p in recorded_files() if p.resolve() not in replayed
    )
    assert missing == []


def test_replayed_files_exist() -> None:
    assert [p for p in replayed_files() if not p.is_file()] == []
