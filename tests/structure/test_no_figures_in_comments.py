"""No measured figure in a comment or docstring of core/, providers/, app/ (issue 50, item 6).

A measured figure goes stale in a comment; it belongs in ``BENCHMARKS.md``, and the comment
names the section (``(BENCHMARKS.md, 'Redis appends')``). The detector reads each module's
comments (``tokenize``, consecutive comment lines joined) and its string statements (``ast``:
docstrings, attribute docstrings), whitespace collapsed so a figure wrapped over two lines is
still one, and looks for the shapes a measurement takes and a specification does not:

- a time in microseconds (``µs``, ``us``): no setting of the gateway is in microseconds;
- an approximate quantity with a unit (``~3 ms``, ``~5 %``, ``~2x``, ``~190 MB``);
- a before → after pair (``3.0 -> 2.2 ms``, ``22.1 → 8.0``);
- a share of a cost (``4 % of the gateway's CPU``, ``25 % cheaper``, ``costs 10 %``);
- a factor of speed or cost (``2x slower``, ``3x the cost``, ``twice as much``);
- a latency percentile or median with a value (``p99 94 ms``, ``median 103 ms``);
- ``measured`` followed by a number in the same sentence.

A timeout, an interval or a size that is a setting (``250 ms``, ``1.5x its size``, ``10,000
entries``) has none of these shapes and passes.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "providers", "app")

_NUM = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?-\s?{_NUM})?"
_UNIT = r"(?:ns|µs|us|ms|s|%|KB|MB|GB|kB|B|x)"
_COST_UNIT = r"(?:ns|µs|us|ms|s|%|KB|MB)"
FIGURE = re.compile(
    "|".join(
        [
            # a time in nano- or microseconds
            rf"{_NUM}\s?(?:ns|µs|us)\b",
            # an approximate quantity with a unit
            rf"~\s?{_NUM}\s?{_UNIT}(?![\w/])",
            rf"~\s?{_NUM}\s?(?:ns|µs|us|ms|%|KB|MB)",
            # before -> after: a unit after the second value, or decimals both sides
            rf"{_RANGE}\s?{_UNIT}?(?:\s?/\s?{_NUM})*\s*(?:->|→)\s*~?{_RANGE}"
            rf"(?:\s?/\s?{_NUM})*\s?{_COST_UNIT}\b",
            r"\d+\.\d+\s*(?:->|→)\s*~?\d+\.\d+",
            rf"\bfrom\s+~?{_RANGE}\s?{_UNIT}?\s+to\s+~?{_RANGE}\s?{_COST_UNIT}\b",
            # a share of a cost, a cost against another
            rf"{_NUM}\s?%\s+(?:of\s+(?:the|a|an|its|each)\b|cheaper|faster|slower|less|more\s+CPU"
            r"|lower|higher)",
            rf"\b(?:saves?|saved|costs?|cost)\s+(?:~\s?)?{_NUM}\s?%",
            rf"\btook\s+~?{_RANGE}\s?(?:ns|µs|us|ms|s)\b",
            rf"{_NUM}\s?{_COST_UNIT}\s+against\s+~?{_NUM}",
            # a factor of speed or cost
            rf"{_NUM}\s?x\s+(?:faster|slower|cheaper|the\s+cost|as\s+much|more\s+CPU)",
            r"\btwice\s+as\s+(?:much|fast|slow)",
            # a latency percentile or median with its value
            rf"\b(?:p50|p90|p95|p99|median)\b[^.;]{{0,30}}?{_NUM}\s?(?:ms|s)\b",
            rf"\bmeasured\b[^.;]{{0,60}}?{_NUM}\s?{_UNIT}",
        ]
    )
)


@dataclass(frozen=True)
class Figure:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r}"


def figures_in(text: str) -> list[str]:
    """The measured figures of one comment or docstring (whitespace collapsed)."""
    flat = " ".join(text.split())
    return [match[0] for match in FIGURE.finditer(flat)]


def _comment_blocks(source: str) -> list[tuple[int, str]]:
    """Consecutive comment lines joined: (first line, text without the ``#``/``#:``)."""
    blocks: list[tuple[int, str]] = []
    last_line = -2
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        text = token.string.lstrip("#:").strip()
        if blocks and line == last_line + 1:
            blocks[-1] = (blocks[-1][0], f"{blocks[-1][1]} {text}")
        else:
            blocks.append((line, text))
        last_line = line
    return blocks


def _string_statements(source: str) -> list[tuple[int, str]]:
    """Docstrings and attribute docstrings: every statement that is a lone string."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.append((node.lineno, node.value.value))
    return found


def scan_source(source: str, path: str) -> list[Figure]:
    """Every measured figure in the comments and docstrings of one module."""
    return [
        Figure(path, line, hit)
        for line, text in [*_comment_blocks(source), *_string_statements(source)]
        for hit in figures_in(text)
    ]


def scan_tree(root: Path) -> list[Figure]:
    found: list[Figure] = []
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            found.extend(scan_source(file.read_text(encoding="utf-8"), rel))
    return found


def test_no_measured_figure_in_a_comment_or_docstring() -> None:
    found = scan_tree(ROOT)
    assert not found, (
        "measured figures in comments/docstrings: move each to BENCHMARKS.md (## Measurements) "
        "and name its section in the comment instead:\n" + "\n".join(map(str, found))
    )


@pytest.mark.parametrize(
    "text",
    [
        "a pipeline of three commands 39.7 -> 16.8 µs",
        "measured here, ~90 us of CPU a command",
        "(on Redis ~4 % of the gateway's CPU at 40 such streams)",
        "that was 10 % of the gateway's CPU on a Redis stream",
        "one per logged event: 25 % cheaper than the former path",
        "a first delta 103 -> 88 ms",
        "one round trip (Redis: ~0.3 ms, against reads)",
        "the keyword call costs 2x the cost of a positional one",
        "an empty full collection took 94 ms, p99 94 ms median without",
        "the gateway's RSS grew by ~190 MB",
        "~25 MB at most",
        "``__init__`` cost ~2x as much",
        "the keyword call costs twice as much",
        "measured on the bench machine: 0.7 ms a start",
        "an empty full collection took 94 ms against 37 on the memory backend",
        "2.6 % of a 500-subscriber fan-out",
        "delivery latency went from 3.5 to 2 ms",
        "went from 0.52-0.57 to 0.47-0.49 s of CPU",
        "taken at once (~840 -> ~600 ns a chunk)",
    ],
)
def test_the_detector_finds_a_measured_figure(text: str) -> None:
    assert figures_in(text), text


@pytest.mark.parametrize(
    "text",
    [
        "The abort reaches the upstream within 250 ms (a specification, not a measurement).",
        "A window holds up to 1.5x its size; Redis keeps at least max_len entries.",
        "Wait 0.5 s between reconnects; at most 10,000 entries; 64 KB a read.",
        "a stream at 50 deltas/s has 20 ms between reads",
        "kept only where removing it costs more than 10 % on a headline figure",
        "(BENCHMARKS.md, 'Redis appends')",
        "now fixed at 1000 ms unless given",
        "a task with progress 0 → 25 → 50 → 75 → 100, then completed",
    ],
)
def test_the_detector_passes_a_specification(text: str) -> None:
    assert figures_in(text) == [], text


def test_comments_are_joined_and_docstrings_read() -> None:
    source = (
        '"""Module: a fast path (~5 %\n of the CPU)."""\n'
        "X = 1  # no figure here\n"
        "# one comment over two lines: 3.0 ->\n"
        "# 2.2 ms a start\n"
        "def f() -> None:\n"
        '    """Waits 250 ms."""\n'
        "    s = '12 µs in a string that is code, not a comment'\n"
    )
    found = scan_source(source, "m.py")
    assert [(f.line, f.text) for f in found] == [(3, "3.0 -> 2.2 ms"), (1, "~5 %")]
