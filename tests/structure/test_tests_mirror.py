"""``tests/`` mirrors the source tree (issue 50, item 5): a folder of ``tests/app``,
``tests/providers`` or ``tests/core`` is a package of the source tree
(``tests/app/backends/redis/`` for ``app/backends/redis/``), or a ``support/`` folder of helpers.

A test module (``test_*.py``) lies only in a mirrored folder, never in ``support/``, and every
folder that holds Python modules is a package (``__init__.py``): test basenames repeat across
folders (``tests/app/backends/redis/test_queue.py``, ...), which pytest imports apart only as
modules of distinct packages.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "providers", "core")
SUPPORT = "support"


def misplaced(root: Path) -> list[str]:
    """What breaks the mirror under ``root/tests/<package>``, one readable line each."""
    found: list[str] = []
    for package in PACKAGES:
        tests = root / "tests" / package
        folders = sorted({f.parent for f in tests.rglob("*.py") if "__pycache__" not in f.parts})
        for folder in folders:
            parts = folder.relative_to(tests).parts
            shown = folder.relative_to(root).as_posix()
            if not (folder / "__init__.py").is_file():
                found.append(f"{shown}/: no __init__.py")
            has_tests = any(folder.glob("test_*.py"))
            if SUPPORT in parts:
                if has_tests:
                    found.append(f"{shown}/: a test module in a support folder")
                continue
            source = root / package / Path(*parts)
            if not (source / "__init__.py").is_file():
                found.append(f"{shown}/: no package {source.relative_to(root).as_posix()}/")
    return found


def test_every_test_folder_mirrors_a_source_package() -> None:
    assert misplaced(ROOT) == []


def test_a_folder_without_its_source_package_fails(tmp_path: Path) -> None:
    def touch(path: str) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text('"""x"""\n')

    for path in (
        "app/__init__.py",
        "app/backends/__init__.py",
        "app/backends/redis/__init__.py",
        "app/backends/redis/queue.py",
        "providers/__init__.py",
        "core/__init__.py",
        "tests/app/__init__.py",
        "tests/app/backends/__init__.py",
        "tests/app/backends/redis/__init__.py",
        "tests/app/backends/redis/test_queue.py",
        "tests/app/support/__init__.py",
        "tests/app/support/helpers.py",
        "tests/core/__init__.py",
        "tests/core/test_engine.py",
    ):
        touch(path)
    assert misplaced(tmp_path) == []

    touch("tests/app/redis/__init__.py")
    touch("tests/app/redis/test_queue.py")
    touch("tests/core/engine/test_steps.py")
    touch("tests/app/support/test_helpers.py")
    touch("app/runs/__init__.py")
    touch("tests/app/runs/test_ending.py")
    assert misplaced(tmp_path) == [
        "tests/app/redis/: no package app/redis/",
        "tests/app/runs/: no __init__.py",
        "tests/app/support/: a test module in a support folder",
        "tests/core/engine/: no __init__.py",
        "tests/core/engine/: no package core/engine/",
    ]
