"""The start-up check of the compat modules: is each internal a fast path needs still there,
with the shape it reads?

A check reports what does not match as a list of problems; :class:`FastPath` runs it once,
logs one warning naming them, and then answers ``None`` (use the public path). An upgrade of a
dependency may make the gateway slower, never broken.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["FastPath", "assigns", "member", "module_member", "parameters"]

log = logging.getLogger("providers.compat")

T = TypeVar("T")


def module_member(module: str, name: str, problems: list[str]) -> Any:
    """``module.name`` imported now (not when this module was), or ``None`` with a problem."""
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        problems.append(f"{module}.{name} is missing")
        return None
    return found


def member(owner: Any, name: str, problems: list[str]) -> Any:
    """``owner.name`` (a class's method or attribute), or ``None`` with a problem."""
    found = getattr(owner, name, None)
    if found is None:
        problems.append(f"{getattr(owner, '__qualname__', owner)}.{name} is missing")
    return found


def parameters(function: Any, expected: list[str], problems: list[str]) -> bool:
    """Whether ``function``'s parameters are named ``expected`` (``self`` included), in order."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        names = []
    if names != expected:
        qualname = getattr(function, "__qualname__", repr(function))
        problems.append(f"{qualname} takes ({', '.join(names)}), not ({', '.join(expected)})")
        return False
    return True


def assigns(function: Any, names: list[str], problems: list[str]) -> bool:
    """Whether ``function``'s own source assigns each ``self.<name>`` (the instance attributes
    a fast path reads: they exist once that method, usually ``__init__``, ran)."""
    qualname = getattr(function, "__qualname__", repr(function))
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        problems.append(f"the source of {qualname} is not readable")
        return False
    ok = True
    for name in names:
        if re.search(rf"self\.{re.escape(name)}\s*(?::[^=\n]*)?=(?!=)", source) is None:
            problems.append(f"{qualname} no longer sets self.{name}")
            ok = False
    return ok


class FastPath(Generic[T]):
    """The internals of one package, checked once (``check`` returns them and the problems)."""

    def __init__(self, package: str, check: Callable[[list[str]], T]) -> None:
        self.package = package
        self._check = check
        self._checked = False
        self._internals: T | None = None

    def internals(self) -> T | None:
        """The checked internals, or ``None`` when one does not match (warned once)."""
        if not self._checked:
            problems: list[str] = []
            try:
                internals = self._check(problems)
            except Exception as error:  # an internal of a shape the check did not foresee
                problems.append(f"the check raised {type(error).__name__}: {error}")
            self._checked = True
            if problems:
                log.warning(
                    "%s's internals differ from the ones its fast path reads (%s): using the "
                    "public path",
                    self.package,
                    "; ".join(problems),
                )
            else:
                self._internals = internals
        return self._internals

    def reset(self) -> None:
        """Check again at the next use (tests that change a dependency)."""
        self._checked = False
        self._internals = None
