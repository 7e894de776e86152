"""``AgentStore``: record/strict modes, atomic batches, notify-once, reset, destroy (§5).

Behaves like ``createAgentStore`` of the reference, on the indexed engine (``core.engine``):
O(size of the event) per dispatch, snapshots built lazily and cached until the next change.
Differences, all additive: events are validated first (an invalid event changes nothing; record
mode reports it through ``last_outcome``/``last_error``, strict mode raises
``EventValidationError``) unless the caller has just validated them itself
(``dispatch(event, validated=True)``), ``dispatch``/``batch`` return outcomes instead of the
state, and read helpers answer without building a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any, Literal

from core.engine import ACCEPTED, DUPLICATE, Engine
from core.events import EventValidationError, _validate, validate_event
from core.issues import AgentProtocolError, AgentProtocolIssue
from core.keys import entity_key, event_key
from core.kinds import ENTITY_MAPS, KIND_ALIASES
from core.state import AgentState

__all__ = ["AgentProtocolError", "AgentStore", "DispatchOutcome", "StoreMode"]

StoreMode = Literal["record", "strict"]
Listener = Callable[[], None]

_DESTROYED = "AgentStore has been destroyed."


class DispatchOutcome(StrEnum):
    """What one event did to the store."""

    ACCEPTED = "accepted"  #: applied
    DUPLICATE = "duplicate"  #: already processed: nothing changed, nobody notified
    REJECTED = "rejected"  #: record mode: a protocol issue was recorded (``last_issue``)
    INVALID = "invalid"  #: not a valid AgentEvent: nothing changed (``last_error``)


_OUTCOMES = (DispatchOutcome.ACCEPTED, DispatchOutcome.DUPLICATE, DispatchOutcome.REJECTED)


class AgentStore:
    """An AgentState with subscribers. Not thread-safe; use from one thread/event loop."""

    __slots__ = (
        "_destroyed",
        "_engine",
        "_listeners",
        "last_error",
        "last_issue",
        "last_outcome",
        "mode",
    )

    def __init__(
        self, initial_state: Mapping[str, Any] | None = None, mode: StoreMode = "record"
    ) -> None:
        if mode not in ("record", "strict"):
            raise ValueError(f'AgentStore mode must be "record" or "strict", not {mode!r}.')
        self.mode: StoreMode = mode
        self._engine = Engine(initial_state, strict=mode == "strict")
        self._listeners: dict[Listener, None] = {}  # an ordered set, like the JS Set
        self._destroyed = False
        #: Outcome of the last event dispatched (also the last one of a batch).
        self.last_outcome: DispatchOutcome | None = None
        #: The issue recorded by the last event, if it was rejected.
        self.last_issue: AgentProtocolIssue | None = None
        #: Why the last event was invalid, if it was.
        self.last_error: EventValidationError | None = None

    # --- the reference API ----------------------------------------------------------------------

    def get_snapshot(self) -> AgentState:
        """The state as plain JSON data (the same object until the next change; read-only)."""
        return self._engine.snapshot()

    def dispatch(self, event: Mapping[str, Any], *, validated: bool = False) -> DispatchOutcome:
        """Apply one event; notify subscribers when the state changed.

        ``validated``: the caller has just checked this very event with ``validate_event``
        (the runner's check, protocol.md §6), so it is not validated a second time; the
        reducer's rules (§4) apply as always. Never pass it for an event checked by nobody.
        """
        if self._destroyed:  # _ensure_active and _apply, inlined: two calls less per event
            raise RuntimeError(_DESTROYED)
        if not validated:
            try:
                error = _validate(event)
            except Exception:  # odd mappings: let validate_event describe it
                error = validate_event(event)
            if error is not None:
                return self._invalid(error)
        outcome = self._apply_checked(event)
        if self._listeners and (
            outcome is DispatchOutcome.ACCEPTED or outcome is DispatchOutcome.REJECTED
        ):
            self._emit()
        return outcome

    def batch(self, events: Iterable[Mapping[str, Any]]) -> list[DispatchOutcome]:
        """Apply events atomically (strict: all or nothing); notify at most once."""
        self._ensure_active()
        engine = self._engine
        strict = self.mode == "strict"
        if strict:
            engine.begin()
        outcomes: list[DispatchOutcome] = []
        try:
            for event in events:
                outcomes.append(self._apply(event))
        except BaseException:
            if strict:
                engine.rollback()
            raise
        if strict:
            engine.commit()
        if any(o is DispatchOutcome.ACCEPTED or o is DispatchOutcome.REJECTED for o in outcomes):
            self._emit()
        return outcomes

    def reset(self, state: Mapping[str, Any] | None = None) -> None:
        """Replace the state (default: empty) and always notify."""
        self._ensure_active()
        self._engine.load(state)
        self.last_outcome = None
        self.last_issue = None
        self.last_error = None
        self._emit()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener()`` after every change; returns the unsubscribe function."""
        self._ensure_active()
        self._listeners[listener] = None

        def unsubscribe() -> None:
            self._listeners.pop(listener, None)

        return unsubscribe

    def destroy(self) -> None:
        """Drop every subscriber; later dispatch/batch/reset/subscribe raise."""
        self._destroyed = True
        self._listeners.clear()

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    # --- read helpers (no snapshot needed) ----------------------------------------------------

    def get_entity(self, kind: str, run_id: str, entity_id: str) -> Mapping[str, Any] | None:
        """One entity as plain data, or None.

        ``kind`` is an entity kind (``message``, ``reasoning``, ``tool``, ``approval``, ``task``,
        ``artifact``), its state-map name (``messages``, ``toolCalls``, ...) or ``toolCall``.
        """
        map_name = ENTITY_MAPS[KIND_ALIASES[kind]]
        record = self._engine.entities[map_name].get(entity_key(run_id, entity_id))
        if record is None:
            return None
        return dict(self._engine.materialize(map_name, record))

    def get_run(self, run_id: str) -> Mapping[str, Any] | None:
        """The run state (``{id, sessionId, status, ...}``) or None."""
        run = self._engine.runs.get(run_id)
        return None if run is None else dict(run)

    def get_session(self, session_id: str) -> Mapping[str, Any] | None:
        session = self._engine.sessions.get(session_id)
        return None if session is None else dict(session)

    def last_sequence(self, run_id: str) -> int | float | None:
        """``lastSequenceByRun[run_id]`` (highest accepted sequence) or None."""
        value: int | float | None = self._engine.last_seq.get(run_id)
        return value

    def has_processed(self, run_id: str, event_id: str) -> bool:
        return self._engine.processed.has_key(event_key(run_id, event_id))

    @property
    def issue_count(self) -> int:
        return len(self._engine.issues)

    def issues(self) -> list[AgentProtocolIssue]:
        return list(self._engine.issues)

    def is_requesting(self) -> bool:
        """True while any run is ``running``."""
        return any(run.get("status") == "running" for run in self._engine.runs.values())

    # --- internals ------------------------------------------------------------------------------

    def _ensure_active(self) -> None:
        if self._destroyed:
            raise RuntimeError(_DESTROYED)

    def _apply(self, event: Mapping[str, Any]) -> DispatchOutcome:
        try:
            error = _validate(event)
        except Exception:  # odd mappings: let validate_event describe it
            error = validate_event(event)
        if error is not None:
            return self._invalid(error)
        return self._apply_checked(event)

    def _invalid(self, error: EventValidationError) -> DispatchOutcome:
        """Record an invalid event (nothing changed); strict mode raises its error."""
        self.last_issue = None
        self.last_outcome = DispatchOutcome.INVALID
        self.last_error = error
        if self.mode == "strict":
            raise error
        return DispatchOutcome.INVALID

    def _apply_checked(self, event: Mapping[str, Any]) -> DispatchOutcome:
        """Reduce a valid event (the reducer's rules, no envelope or payload validation)."""
        self.last_issue = None
        self.last_error = None
        try:
            code = self._engine.apply(event)
        except AgentProtocolError as exc:
            self.last_outcome = DispatchOutcome.REJECTED
            self.last_issue = exc.issue
            raise
        outcome = _OUTCOMES[code]
        self.last_outcome = outcome
        if code != ACCEPTED and code != DUPLICATE:
            self.last_issue = self._engine.issues[-1]
        return outcome

    def _emit(self) -> None:
        for listener in list(self._listeners):
            listener()
