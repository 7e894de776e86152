"""``docs/ARCHITECTURE.md``'s three walks stay true (issue 50, item 5): each listed file exists,
each walk is as long as its title says and within its bound, and each hop's ``→ name`` is a
name one of the two files defines (a function, method or class) and the other refers to (an
import, a call, an attribute, a string it looks up) — the link a newcomer follows."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SECTION = "## Three walks"
#: The bounds of issue 50: to the upstream request, to the upstream socket, to the decision.
BOUNDS = (6, 7, 1)
TITLE = re.compile(r"^### (?P<what>.+) \((?P<count>\d+) files?\)$")
STEP = re.compile(r"^(?P<n>\d+)\. `(?P<path>[^`]+\.py)` — (?P<text>.+)$")
HOP = re.compile(r"→ `(?P<name>\w+)`$")


@dataclass
class Step:
    path: str
    hop: str | None  # the name that leads to the next step


@dataclass
class Walk:
    what: str
    count: int
    steps: list[Step]


def walks(text: str) -> list[Walk]:
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    found: list[Walk] = []
    for line in text[start : end if end != -1 else len(text)].splitlines():
        title = TITLE.match(line)
        if title:
            found.append(Walk(title["what"], int(title["count"]), []))
            continue
        step = STEP.match(line)
        if step and found:
            assert int(step["n"]) == len(found[-1].steps) + 1, line
            hop = HOP.search(step["text"])
            found[-1].steps.append(Step(step["path"], hop["name"] if hop else None))
    return found


def defined(tree: ast.AST) -> set[str]:
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def referred(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def broken_hops(walk: Walk, root: Path) -> list[str]:
    """The hops of ``walk`` whose name does not link its two files (or a file that is gone)."""
    problems: list[str] = []
    trees: dict[str, ast.AST] = {}
    for step in walk.steps:
        path = root / step.path
        if not path.is_file():
            problems.append(f"{step.path} does not exist")
            continue
        trees[step.path] = ast.parse(path.read_text(encoding="utf-8"))
    for here, there in zip(walk.steps, walk.steps[1:], strict=False):
        if here.hop is None:
            problems.append(f"{here.path}: no `→ name` to {there.path}")
            continue
        if here.path not in trees or there.path not in trees:
            continue
        a, b = trees[here.path], trees[there.path]
        name = here.hop
        if not (
            (name in defined(b) and name in referred(a))
            or (name in defined(a) and name in referred(b))
        ):
            problems.append(f"{here.path} → {there.path}: `{name}` does not link them")
    if walk.steps and walk.steps[-1].hop is not None:
        problems.append(f"{walk.steps[-1].path}: the last step leads nowhere")
    return problems


def test_the_three_walks_hold_and_stay_within_their_bounds() -> None:
    found = walks(DOC.read_text(encoding="utf-8"))
    assert len(found) == len(BOUNDS), [w.what for w in found]
    for walk, bound in zip(found, BOUNDS, strict=True):
        assert len(walk.steps) == walk.count, f"{walk.what}: lists {len(walk.steps)} files"
        assert walk.count <= bound, f"{walk.what}: {walk.count} files, the bound is {bound}"
        assert broken_hops(walk, ROOT) == [], walk.what
    assert found[-1].steps[0].path == "app/runs/ending.py"


def test_a_gone_file_and_a_hop_that_links_nothing_are_found(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from b import go\n\ndef start():\n    go()\n")
    (tmp_path / "b.py").write_text("def go():\n    pass\n")
    (tmp_path / "c.py").write_text("def other():\n    pass\n")
    text = (
        f"{SECTION}\n\n### A walk (3 files)\n\n"
        "1. `a.py` — starts → `go`\n2. `b.py` — goes → `go`\n3. `c.py` — ends\n"
        "\n### Another (2 files)\n\n1. `a.py` — starts → `start`\n2. `gone.py` — gone\n"
    )
    first, second = walks(text)
    assert (first.count, len(first.steps)) == (3, 3)
    assert broken_hops(first, tmp_path) == ["b.py → c.py: `go` does not link them"]
    assert broken_hops(second, tmp_path) == ["gone.py does not exist"]
