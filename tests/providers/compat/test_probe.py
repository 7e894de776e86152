"""The compat modules' start-up check: what it finds missing, and one warning per package."""

from __future__ import annotations

import logging

import pytest

from providers.compat.probe import FastPath, assigns, member, module_member, parameters


class Shape:
    limit: int

    def __init__(self, size: int) -> None:
        self._size = size
        self._typed: int = 0
        self._compared = None

    def read(self, count: int) -> int:
        return count

    def compares(self) -> bool:
        return self._size == 1  # read, not set


def test_the_checks_name_what_differs() -> None:
    problems: list[str] = []
    assert assigns(Shape.__init__, ["_size", "_typed", "_compared"], problems)
    assert parameters(Shape.read, ["self", "count"], problems)
    assert member(Shape, "read", problems) is Shape.read
    assert module_member("json", "dumps", problems) is not None
    assert problems == []
    assert not assigns(Shape.__init__, ["_gone", "size"], problems)
    assert not assigns(Shape.compares, ["_size"], problems)
    assert not parameters(Shape.read, ["self", "n"], problems)
    assert member(Shape, "_write", problems) is None
    assert module_member("json", "_nothing_here", problems) is None
    assert module_member("no_such_module_here", "x", problems) is None
    assert problems == [
        "Shape.__init__ no longer sets self._gone",
        "Shape.__init__ no longer sets self.size",
        "Shape.compares no longer sets self._size",
        "Shape.read takes (self, count), not (self, n)",
        "Shape._write is missing",
        "json._nothing_here is missing",
        "no_such_module_here.x is missing",
    ]


def test_a_mismatch_warns_once_and_answers_none(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def check(problems: list[str]) -> str:
        calls.append(1)
        problems.append("Shape._gone is missing")
        return "internals"

    path = FastPath("somepkg", check)
    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        assert path.internals() is None
        assert path.internals() is None
    assert len(calls) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "somepkg's internals differ from the ones its fast path reads (Shape._gone is missing): "
        "using the public path"
    ]


def test_a_check_that_raises_is_a_mismatch(caplog: pytest.LogCaptureFixture) -> None:
    def check(problems: list[str]) -> str:
        raise TypeError("an unforeseen shape")

    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        assert FastPath("somepkg", check).internals() is None
    assert "the check raised TypeError: an unforeseen shape" in caplog.records[0].getMessage()


def test_a_match_answers_the_internals_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = FastPath("somepkg", lambda problems: "internals")
    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        assert path.internals() == "internals"
    assert caplog.records == []
    path.reset()
    assert path.internals() == "internals"
