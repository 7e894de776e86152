"""Bounded label values: every label goes through a :class:`LabelGuard`.

A closed vocabulary where the spec has one (event types, outcomes, error and issue codes,
transports), otherwise the first ``max_values`` distinct values seen (provider names come from
the config, backend operations from the code) and ``"other"`` beyond. The conversation key is
never a label.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from core.events import EVENT_TYPES
from core.runs import RUN_OUTCOMES

__all__ = [
    "ERROR_CODES",
    "EVENT_TYPES",
    "ISSUE_CODES",
    "OTHER",
    "OUTCOMES",
    "TRANSPORTS",
    "LabelGuard",
]

OTHER: Final = "other"

OUTCOMES: Final = RUN_OUTCOMES
TRANSPORTS: Final = frozenset({"sse", "ws"})
ISSUE_CODES: Final = frozenset(
    {
        "duplicate_entity",
        "invalid_sequence",
        "invalid_transition",
        "missing_entity",
        "missing_run",
    }
)
#: AgentError codes of http-api.md "Errors" that a run can fail with.
ERROR_CODES: Final = frozenset(
    {
        "upstream_http_error",
        "upstream_connect_error",
        "upstream_idle_timeout",
        "upstream_timeout",
        "upstream_dropped",
        "upstream_malformed_chunk",
        "upstream_protocol_error",
        "upstream_error",
        "upstream_event_too_large",
        "truncated_arguments",
        "tool_incomplete",
        "task_incomplete",
        "tool_result_timeout",
        "wait_timeout",
        "gateway_instance_lost",
        "provider_error",
    }
)


class LabelGuard:
    """Maps raw values to a bounded label vocabulary.

    With ``allowed``, anything outside it is ``"other"``. Without, the first ``max_values``
    distinct values are kept as they are and later new ones become ``"other"``.
    """

    __slots__ = ("_allowed", "_max_values", "_seen")

    def __init__(self, allowed: Iterable[str] | None = None, *, max_values: int = 32) -> None:
        self._allowed = frozenset(allowed) if allowed is not None else None
        self._max_values = max_values
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        if not isinstance(value, str) or not value:
            return OTHER
        if self._allowed is not None:
            return value if value in self._allowed else OTHER
        if value in self._seen:
            return value
        if len(self._seen) >= self._max_values or len(value) > 64:
            return OTHER
        self._seen.add(value)
        return value

    def seed(self, values: Iterable[str]) -> None:
        """Pre-register known values (e.g. the configured provider names)."""
        for value in values:
            self(value)
