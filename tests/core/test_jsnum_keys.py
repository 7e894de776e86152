"""JavaScript number helpers and UTF-16 entity keys."""

from __future__ import annotations

import pytest

from core import entity_key, event_key, utf16_len
from core.jsnum import is_js_finite, is_js_integer, is_js_number, js_number_str


class IntLike(int):
    pass


class FloatLike(float):
    pass


@pytest.mark.parametrize(
    ("value", "number", "finite", "integer"),
    [
        (0, True, True, True),
        (3.0, True, True, True),
        (3.5, True, True, False),
        (True, False, False, False),
        (None, False, False, False),
        ("1", False, False, False),
        (float("inf"), True, False, False),
        (float("nan"), True, False, False),
        (10**400, True, False, False),
        (2**53 + 1, True, True, True),
        (IntLike(4), True, True, True),
        (FloatLike(4.5), True, True, False),
        (FloatLike("inf"), True, False, False),
        (IntLike(10**400), True, False, False),
    ],
)
def test_number_rules(value: object, number: bool, finite: bool, integer: bool) -> None:
    assert is_js_number(value) is number
    assert is_js_finite(value) is finite
    assert is_js_integer(value) is integer


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3, "3"),
        (3.0, "3"),
        (-0.5, "-0.5"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (2**53, "9007199254740992"),
        (10**22, "1e+22"),
    ],
)
def test_js_number_str(value: float, text: str) -> None:
    assert js_number_str(value) == text


def test_entity_key_uses_utf16_length() -> None:
    assert entity_key("run-1", "m") == "5:run-1m"
    assert utf16_len("é") == 1
    assert utf16_len("😀") == 2
    assert entity_key("r😀", "m") == "3:r😀m"
    assert utf16_len("\ud800") == 1  # a lone surrogate is one code unit
    assert event_key("ab", "e") == "2:abe"
    # The same id in two runs never collides, even when the concatenation would.
    assert entity_key("a", "bc") != entity_key("ab", "c")
