"""Replay JSON Lines of AgentEvents into ``{state, issues, messages, invalid}`` (pure).

Line numbers are 1-based; blank lines are skipped. A line that is not JSON or not a valid
AgentEvent is reported in ``invalid`` as ``{line, error}`` and not reduced. In strict mode the
replay stops at the first invalid line or protocol issue by raising ``ReplayStopped``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.events import EventValidationError, validate_event
from core.issues import AgentProtocolError, AgentProtocolIssue
from core.projection import project_messages
from core.state import AgentState
from core.store import AgentStore

__all__ = ["ReplayResult", "ReplayStopped", "iter_jsonl", "replay_jsonl"]


class ReplayStopped(Exception):
    """Strict replay stopped at ``line``; ``issue`` is set when a protocol issue stopped it."""

    def __init__(self, line: int, message: str, issue: AgentProtocolIssue | None = None) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message
        self.issue = issue


@dataclass(slots=True)
class ReplayResult:
    state: AgentState
    invalid: list[dict[str, Any]] = field(default_factory=list)
    #: The valid events, in order, with their line numbers (for validators).
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    @property
    def issues(self) -> list[AgentProtocolIssue]:
        issues: list[AgentProtocolIssue] = self.state["issues"]
        return issues

    @property
    def messages(self) -> list[dict[str, Any]]:
        return project_messages(self.state)

    def to_dict(self) -> dict[str, Any]:
        """The CLI's output object: ``{state, issues, messages, invalid}``."""
        return {
            "state": self.state,
            "issues": self.issues,
            "messages": self.messages,
            "invalid": self.invalid,
        }


def iter_jsonl(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the non-blank lines (split on ``\\n`` only)."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(line: str) -> tuple[Any, str | None]:
    """Parse one line as ``JSON.parse`` would (orjson first, the stdlib for its edge cases).

    orjson refuses two things ``JSON.parse`` accepts: lone surrogate escapes and numbers beyond
    double range (``1e400`` is ``Infinity`` in JavaScript); the stdlib parser takes both, with
    ``NaN``/``Infinity`` literals refused as in JavaScript.
    """
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError as exc:
        first_error = exc
    try:
        return json.loads(line, parse_constant=_reject_constant), None
    except (ValueError, RecursionError):
        return None, f"invalid JSON: {first_error}"


def replay_jsonl(text: str | Iterable[tuple[int, str]], *, strict: bool = False) -> ReplayResult:
    """Reduce every valid event of ``text`` (JSON Lines) in record mode, or strictly."""
    store = AgentStore(mode="strict" if strict else "record")
    result = ReplayResult(state={})
    lines = iter_jsonl(text) if isinstance(text, str) else text
    for number, line in lines:
        data, parse_error = _parse(line)
        error = parse_error
        if error is None:
            invalid = validate_event(data)
            if invalid is not None:
                error = _describe(invalid)
        if error is not None:
            if strict:
                raise ReplayStopped(number, error)
            result.invalid.append({"line": number, "error": error})
            continue
        try:
            store.dispatch(data)
        except AgentProtocolError as exc:
            raise ReplayStopped(
                number, f"{exc.issue['code']}: {exc.issue['message']}", exc.issue
            ) from None
        result.events.append((number, data))
    result.state = store.get_snapshot()
    return result


def _describe(error: EventValidationError) -> str:
    return f"invalid AgentEvent: {error.path} {error.reason}"
