"""Run-level protocol constants: terminal run events, abort reasons, the session title cut.

One definition, used by the reducer, the providers and the gateway.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "ABORT_REASONS",
    "QUEUED_CANCEL_REASONS",
    "RUN_OUTCOMES",
    "RUN_TERMINAL_TYPES",
    "RUN_TERMINAL_TYPE_LIST",
    "TITLE_MAX_CHARS",
    "AbortReason",
    "QueuedCancelReason",
    "RunOutcome",
    "RunTerminalType",
]

#: The events that end a run (exactly one per run).
RunTerminalType = Literal["run.completed", "run.failed", "run.cancelled"]
#: The same, in the spec's order (completed, failed, cancelled).
RUN_TERMINAL_TYPE_LIST: Final[tuple[RunTerminalType, ...]] = get_args(RunTerminalType)
RUN_TERMINAL_TYPES: Final[frozenset[str]] = frozenset(RUN_TERMINAL_TYPE_LIST)

#: How a run ended: its terminal event type without the ``run.`` prefix.
RunOutcome = Literal["completed", "failed", "cancelled"]
RUN_OUTCOMES: Final[frozenset[str]] = frozenset(get_args(RunOutcome))

#: Why a run was aborted: a user abort, a multitask ``interrupt``, or the gateway shutting down.
AbortReason = Literal["aborted", "interrupted", "shutdown"]
ABORT_REASONS: Final[frozenset[str]] = frozenset(get_args(AbortReason))

#: Why a queued run was cancelled before it started: an abort naming it, or a later interrupt.
QueuedCancelReason = Literal["aborted", "interrupted"]
QUEUED_CANCEL_REASONS: Final[frozenset[str]] = frozenset(get_args(QueuedCancelReason))

#: A session title is the first prompt's text cut to this many characters.
TITLE_MAX_CHARS: Final = 80
