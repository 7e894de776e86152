"""A backend that passes every operation to another: the base of every wrapper.

No operation is written here: :class:`DelegatingBackend` gets one forward per operation of
:class:`Backend`, made from :func:`backend_operations` when this module loads, so a new
operation of the interface reaches every wrapper without a line of its own. A wrapper
subclasses it and writes only the operations it adds to (the archive's hooks), or makes its
own from :func:`backend_operations` (the metrics' timing of every coroutine operation).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from types import FunctionType
from typing import TYPE_CHECKING, Any

from app.backends.base import Backend
from app.backends.types import AppendDone, ConversationRef, LogItem

__all__ = ["DelegatingBackend", "backend_operations"]


@cache
def backend_operations() -> Mapping[str, bool]:
    """Every operation of :class:`Backend` by name (those of its roles), True for a coroutine."""
    return {
        name: inspect.iscoroutinefunction(value)
        for role in reversed(Backend.__mro__)
        if role.__module__ == "app.backends.roles"
        for name, value in vars(role).items()
        if callable(value) and not name.startswith("_")
    }


class DelegatingBackend:
    """Every operation of ``inner``, unchanged; a subclass overrides the ones it adds to.

    A :class:`Backend` by its operations (made below), not by inheritance: mypy sees them
    through ``__getattr__`` (for typing only; nothing answers an unknown name at run time),
    and checks a wrapper's own operations against :class:`Backend` where it is used as one.
    """

    def __init__(self, inner: Backend) -> None:
        self._inner = inner

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Callable[..., Any]: ...

    @property
    def inner(self) -> Backend:
        return self._inner

    @property
    def inline_appends(self) -> bool:
        return self._inner.inline_appends

    @inline_appends.setter
    def inline_appends(self, value: bool) -> None:
        self._inner.inline_appends = value

    @property
    def appends_wait(self) -> bool:
        return self._inner.appends_wait

    @appends_wait.setter
    def appends_wait(self, value: bool) -> None:
        self._inner.appends_wait = value

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        # Not passed on (the one operation that is not): a subclass that adds to
        # ``append_batch`` would be skipped by it. One that passes it on does what it adds in
        # ``done`` (``ArchivingBackend``); without it the caller awaits ``append_batch``.
        return False


def _forward(op: str) -> Callable[..., Any]:
    """``op`` of ``self._inner``, called with the same arguments: a plain function with the
    interface's parameters and defaults, answering what the inner one answers (a coroutine
    operation's own coroutine, awaited by the caller: no frame of its own to pass through)."""
    declared = getattr(Backend, op)
    parameters = list(inspect.signature(declared).parameters.values())[1:]  # after self
    names, passed, keyword_only = [], [], False
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if not keyword_only:
                names.append("*")
                keyword_only = True
            passed.append(f"{parameter.name}={parameter.name}")
        elif parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            passed.append(parameter.name)
        else:
            raise TypeError(f"Backend.{op}: a {parameter.kind.description} parameter")
        names.append(parameter.name)
    source = (
        f"def {op}(self, {', '.join(names)}):\n    return self._inner.{op}({', '.join(passed)})\n"
    )
    made: dict[str, Any] = {}
    exec(source, made)  # the interface's own names only: no input from outside
    forward: FunctionType = made[op]
    forward.__defaults__ = declared.__defaults__
    forward.__kwdefaults__ = declared.__kwdefaults__
    forward.__module__ = __name__
    forward.__qualname__ = f"DelegatingBackend.{op}"
    forward.__doc__ = declared.__doc__
    return forward


for _op in backend_operations():
    if _op not in vars(DelegatingBackend):
        setattr(DelegatingBackend, _op, _forward(_op))
