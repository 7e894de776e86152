"""``docs/ARCHITECTURE.md`` names every module of ``core/``, ``providers/`` and ``app/``, one line
each (issue 50, item 5): a module added without its line, or a line left for a gone module, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("core", "providers", "app")
SECTION = "## Every module"
LINE = re.compile(r"^- `(?P<path>[^`]+\.py)` — (?P<what>\S.*)$")


def named_modules(text: str) -> list[str]:
    """The module paths the doc's "Every module" section names, in order (each with a line)."""
    start = text.index(SECTION) + len(SECTION)
    end = text.find("\n## ", start)
    section = text[start : end if end != -1 else len(text)]
    return [m["path"] for m in map(LINE.match, section.splitlines()) if m is not None]


def source_modules(root: Path) -> set[str]:
    files = [f for package in PACKAGES for f in (root / package).rglob("*.py")]
    return {f.relative_to(root).as_posix() for f in files}


def missing_and_gone(text: str, root: Path) -> tuple[list[str], list[str]]:
    named = named_modules(text)
    modules = source_modules(root)
    return sorted(modules - set(named)), sorted(set(named) - modules)


def test_every_module_is_named_once_and_every_named_module_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing, gone = missing_and_gone(text, ROOT)
    assert not missing, f"modules missing from docs/ARCHITECTURE.md ({SECTION}): {missing}"
    assert not gone, f"docs/ARCHITECTURE.md names modules that are gone: {gone}"
    named = named_modules(text)
    assert len(named) == len(set(named)), "a module is named twice"


def test_a_new_module_without_its_line_and_a_line_without_its_module_fail(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "app" / "kept.py").write_text('"""Kept."""\n')
    (tmp_path / "app" / "new.py").write_text('"""New."""\n')
    text = f"# x\n\n{SECTION}\n\n- `app/kept.py` — kept.\n- `app/old.py` — gone.\n\n## Next\n"
    assert missing_and_gone(text, tmp_path) == (["app/new.py"], ["app/old.py"])
    text = f"{SECTION}\n\n- `app/kept.py` — kept.\n- `app/new.py` — \n"
    assert missing_and_gone(text, tmp_path)[0] == ["app/new.py"], "a line needs its text"
