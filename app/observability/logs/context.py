"""Log context: ``request_id``, ``conversation``, ``run_id``, ``provider`` in context variables
(and ``trace_id``, ``span_id`` of the current span when ``[telemetry]`` is on).

Every record logged inside a request or a run carries them (:func:`log_context`); asyncio
tasks inherit them from where they were created.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Final

__all__ = ["CONTEXT_FIELDS", "CONTEXT_VARS", "current_log_context", "log_context"]

CONTEXT_FIELDS: Final = ("request_id", "conversation", "run_id", "provider", "trace_id", "span_id")

CONTEXT_VARS: Final[dict[str, ContextVar[str | None]]] = {
    name: ContextVar(f"agent_gateway_log_{name}", default=None) for name in CONTEXT_FIELDS
}


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Bind context fields (``request_id``, ``conversation``, ``run_id``, ``provider``)."""
    tokens: list[tuple[ContextVar[str | None], Token[str | None]]] = []
    for name, value in fields.items():
        var = CONTEXT_VARS.get(name)
        if var is None:
            raise TypeError(f"unknown log context field {name!r}")
        tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_log_context() -> dict[str, str]:
    """The bound context fields that have a value."""
    out: dict[str, str] = {}
    for name, var in CONTEXT_VARS.items():
        value = var.get()
        if value is not None:
            out[name] = value
    return out
