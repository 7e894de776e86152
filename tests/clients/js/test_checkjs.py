"""clients/js's JavaScript type-checks from its JSDoc (tsc --checkJs, strict, noImplicitAny)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.js.support import CLIENT, type_check

# A parameter without a type and a string used as a number: what the check must refuse.
UNTYPED = """\
export function twice(value) { return value * 2; }
/** @param {string} text */
export function half(text) { return text / 2; }
"""


def test_the_sources_type_check() -> None:
    # jsconfig.json: src/*.js, strict with noImplicitAny; each module's .d.ts types its imports.
    proc = type_check(CLIENT, "jsconfig.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_check_refuses_an_untyped_parameter_and_a_type_error(tmp_path: Path) -> None:
    """The same settings over the sources plus a file with two errors: both are reported."""
    (tmp_path / "untyped.js").write_text(UNTYPED)
    config = {
        "extends": str(CLIENT / "jsconfig.json"),
        "include": [str(CLIENT / "src" / "*.js"), str(tmp_path / "untyped.js")],
    }
    (tmp_path / "jsconfig.json").write_text(json.dumps(config))
    proc = type_check(CLIENT, str(tmp_path / "jsconfig.json"))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "untyped.js(1," in output and "TS7006" in output, output  # implicit any
    assert "untyped.js(3," in output and "TS2362" in output, output  # string / number
    assert "src/" not in output, output  # the sources themselves stay clean
