"""The event factory: one per run, numbering and stamping its events (protocol.md §1).

Mirrors ``createAgentEventFactory`` of the reference: sequence starts at 0 and goes up by one,
an explicit sequence N makes the next generated one N+1 (the factory keeps the highest used),
a negative or non-integer sequence raises, the default ``eventId`` is
``f"{runId}:{sequence}:{type}"``, and ``parentId``/``meta`` keys exist only when given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from core.events import PROTOCOL_VERSION
from core.jsnum import is_js_integer, js_number_str

__all__ = ["EventFactory"]


#: Below this, ``str(sequence + 1)`` is JavaScript's ``String()`` of it (a safe integer).
_FAST_SEQUENCE_MAX = 2**53 - 2


_time = time.time


def _now_ms() -> float:
    return _time() * 1000.0


class EventFactory:
    """Creates wire-form AgentEvent dicts for one ``(session_id, run_id)``."""

    __slots__ = ("_now", "_sequence", "run_id", "session_id")

    def __init__(
        self,
        session_id: str,
        run_id: str,
        now: Callable[[], float] | None = None,
        *,
        initial_sequence: int = -1,
    ) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self._now: Callable[[], float] = now if now is not None else _now_ms
        self._sequence: int = initial_sequence

    @property
    def sequence(self) -> int:
        """The highest sequence used so far (-1 before any event)."""
        return self._sequence

    def next_event(self, type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``create(type, payload)`` for a dict payload and no option: the call of every
        streamed delta, without ``create``'s keyword handling (see BENCHMARKS.md, "Costs
        behind the code's shortcuts")."""
        seq = self._sequence + 1
        if seq > _FAST_SEQUENCE_MAX:
            return self.create(type, payload)
        self._sequence = seq
        now = self._now
        run_id = self.run_id
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "type": type,
            "eventId": f"{run_id}:{seq}:{type}",
            "sessionId": self.session_id,
            "runId": run_id,
            "sequence": seq,
            # The default clock inline: one Python call less per event.
            "timestamp": _time() * 1000.0 if now is _now_ms else now(),
            "payload": payload,
        }

    def create(
        self,
        type: str,
        payload: Mapping[str, Any],
        *,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        sequence: int | None = None,
        event_id: str | None = None,
        timestamp: float | None = None,
    ) -> dict[str, Any]:
        """Return the next event. Raises ``ValueError`` for a negative/non-integer sequence."""
        if sequence is None and event_id is None and self._sequence < _FAST_SEQUENCE_MAX:
            # The common case: the next int sequence, whose decimal text is JS's String(n).
            seq = self._sequence = self._sequence + 1
            fast: dict[str, Any] = {
                "protocolVersion": PROTOCOL_VERSION,
                "type": type,
                "eventId": f"{self.run_id}:{seq}:{type}",
                "sessionId": self.session_id,
                "runId": self.run_id,
                "sequence": seq,
                "timestamp": timestamp if timestamp is not None else self._now(),
                "payload": payload if isinstance(payload, dict) else dict(payload),
            }
            if parent_id is not None:
                fast["parentId"] = parent_id
            if meta is not None:
                fast["meta"] = meta if isinstance(meta, dict) else dict(meta)
            return fast
        next_sequence: Any = self._sequence + 1 if sequence is None else sequence
        if not is_js_integer(next_sequence) or next_sequence < 0:
            raise ValueError("Agent event sequence must be a non-negative integer.")
        if isinstance(next_sequence, float):
            next_sequence = int(next_sequence)
        if next_sequence > self._sequence:
            self._sequence = next_sequence
        event: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "type": type,
            "eventId": event_id
            if event_id is not None
            else f"{self.run_id}:{js_number_str(next_sequence)}:{type}",
            "sessionId": self.session_id,
            "runId": self.run_id,
            "sequence": next_sequence,
            "timestamp": timestamp if timestamp is not None else self._now(),
            "payload": payload if isinstance(payload, dict) else dict(payload),
        }
        if parent_id is not None:
            event["parentId"] = parent_id
        if meta is not None:
            event["meta"] = meta if isinstance(meta, dict) else dict(meta)
        return event
