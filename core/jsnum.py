"""JavaScript number semantics for plain JSON data.

The reference validator runs in JavaScript, so "is a number", "is finite" and "is an integer"
follow ``typeof x === "number"``, ``Number.isFinite`` and ``Number.isInteger``:

- booleans are never numbers (Python's ``bool`` is an ``int`` subclass, so it is excluded);
- ``3.0`` is an integer;
- an integer too large for a double becomes ``Infinity`` in JavaScript, so it is not finite
  (checked by magnitude, never by a conversion that could raise).
"""

from __future__ import annotations

import math

__all__ = ["is_js_finite", "is_js_integer", "is_js_number", "js_number_str"]

# Integers at or beyond this magnitude round to Infinity when read as an IEEE-754 double
# (half-way between the largest double, 2**1024 - 2**971, and 2**1024; ties go to even).
_DOUBLE_OVERFLOW = 2**1024 - 2**970
_SAFE_INTEGER = 2**53


def is_js_number(value: object) -> bool:
    """``typeof value === "number"`` for JSON data (bool excluded, NaN/Infinity included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_js_finite(value: object) -> bool:
    """``Number.isFinite(value)``."""
    t = type(value)
    if t is int:
        return -_DOUBLE_OVERFLOW < value < _DOUBLE_OVERFLOW  # type: ignore[operator]
    if t is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_DOUBLE_OVERFLOW < value < _DOUBLE_OVERFLOW
    if isinstance(value, float):
        return math.isfinite(value)
    return False


def is_js_integer(value: object) -> bool:
    """``Number.isInteger(value)``."""
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return is_js_finite(value)


def js_number_str(value: int | float) -> str:
    """``String(value)`` for a finite number, as used in the reference's issue messages."""
    if isinstance(value, int):
        if -_SAFE_INTEGER < value < _SAFE_INTEGER:
            return str(int(value))
        value = float(value)
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
    return text
