"""The pure reducer: ``reduce_agent_state(state, event) -> state`` (protocol.md §4).

A direct port of ``reduceAgentState`` (reference phase 2): same checks in the same order, same
issue codes and texts, same stored fields. It never mutates its input; unchanged parts of the
state are shared with the result, and an already-processed event returns the very same object.
It costs O(size of the state) per event (maps are copied); hot paths use ``core.store``.

Events are expected to be valid (``core.events.validate_event``); an invalid event is ignored
(the same state object is returned) so a record-mode fold never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import issues as msgs
from core.events import validate_event
from core.issues import IssueCode, make_issue
from core.keys import entity_key, event_key
from core.kinds import ENTITY_MAPS, EVENT_ENTITY_KIND, ID_FIELDS, START_TYPES, TERMINAL_STATUSES
from core.runs import RUN_TERMINAL_TYPES
from core.state import AgentState, create_agent_state
from core.transitions import follow_up, start_entity

__all__ = ["create_agent_state", "entity_key", "reduce_agent_state"]


def _accept(state: AgentState, event: Mapping[str, Any], patch: dict[str, Any]) -> AgentState:
    run_id: str = event["runId"]
    nxt = dict(state)
    nxt.update(patch)
    processed = dict(state["processedEventIds"])
    processed[event_key(run_id, event["eventId"])] = True
    nxt["processedEventIds"] = processed
    last = dict(state["lastSequenceByRun"])
    last[run_id] = event["sequence"]
    nxt["lastSequenceByRun"] = last
    return nxt


def _reject(
    state: AgentState, event: Mapping[str, Any], code: IssueCode, message: str
) -> AgentState:
    run_id: str = event["runId"]
    nxt = dict(state)
    processed = dict(state["processedEventIds"])
    processed[event_key(run_id, event["eventId"])] = True
    nxt["processedEventIds"] = processed
    nxt["issues"] = [*state["issues"], make_issue(code, event["eventId"], run_id, message)]
    return nxt


def _require_run(state: AgentState, event: Mapping[str, Any]) -> AgentState | None:
    run = state["runs"].get(event["runId"])
    if run is None:
        return _reject(
            state, event, "missing_run", msgs.msg_missing_run(event["runId"], event["type"])
        )
    if run["sessionId"] != event["sessionId"]:  # pragma: no cover - rule 3 rejects first
        return _reject(
            state,
            event,
            "invalid_transition",
            msgs.msg_session_mismatch(event["runId"], run["sessionId"], event["sessionId"]),
        )
    return None


def reduce_agent_state(state: AgentState, event: Mapping[str, Any]) -> AgentState:
    """Fold one event into ``state`` and return the next state (``state`` is not mutated)."""
    if validate_event(event) is not None:
        return state
    run_id: str = event["runId"]
    if event_key(run_id, event["eventId"]) in state["processedEventIds"]:
        return state

    last = state["lastSequenceByRun"].get(run_id)
    sequence = event["sequence"]
    if last is not None and sequence <= last:
        return _reject(state, event, "invalid_sequence", msgs.msg_sequence(sequence, last, run_id))

    etype: str = event["type"]
    current = state["runs"].get(run_id)
    if current is not None:
        if current["sessionId"] != event["sessionId"] and etype != "session.started":
            return _reject(
                state,
                event,
                "invalid_transition",
                msgs.msg_session_mismatch(run_id, current["sessionId"], event["sessionId"]),
            )
        if current["status"] != "running" and etype not in ("session.started", "run.started"):
            return _reject(
                state,
                event,
                "invalid_transition",
                msgs.msg_run_not_running(run_id, current["status"]),
            )

    payload: Mapping[str, Any] = event["payload"]
    timestamp = event["timestamp"]

    if etype == "session.started":
        session_id: str = event["sessionId"]
        if session_id in state["sessions"]:
            return _reject(state, event, "duplicate_entity", msgs.msg_duplicate_session(session_id))
        session: dict[str, Any] = {"id": session_id}
        if "title" in payload:
            session["title"] = payload["title"]
        session["createdAt"] = timestamp
        return _accept(state, event, {"sessions": {**state["sessions"], session_id: session}})

    if etype == "run.started":
        if current is not None:
            return _reject(state, event, "duplicate_entity", msgs.msg_duplicate_run(run_id))
        run: dict[str, Any] = {"id": run_id, "sessionId": event["sessionId"], "status": "running"}
        if "input" in payload:
            run["input"] = payload["input"]
        run["createdAt"] = timestamp
        run["updatedAt"] = timestamp
        return _accept(state, event, {"runs": {**state["runs"], run_id: run}})

    if etype in RUN_TERMINAL_TYPES:
        problem = _require_run(state, event)
        if problem is not None:
            return problem
        assert current is not None
        ended = dict(current)
        ended["status"] = etype[4:]
        for field, owner in (
            ("output", "run.completed"),
            ("usage", "run.completed"),
            ("error", "run.failed"),
            ("reason", "run.cancelled"),
        ):
            if etype == owner:
                if field in payload:
                    ended[field] = payload[field]
                else:
                    ended.pop(field, None)
        ended["updatedAt"] = timestamp
        return _accept(state, event, {"runs": {**state["runs"], run_id: ended}})

    kind = EVENT_ENTITY_KIND[etype]
    map_name = ENTITY_MAPS[kind]
    entity_id: str = payload[ID_FIELDS[kind]]
    key = entity_key(run_id, entity_id)
    entities: dict[str, Any] = state[map_name]

    if etype in START_TYPES:
        problem = _require_run(state, event)
        if problem is not None:
            return problem
        if key in entities:
            return _reject(
                state, event, "duplicate_entity", msgs.msg_duplicate_entity(kind, entity_id)
            )
        record = start_entity(kind, entity_id, event)
        return _accept(
            state,
            event,
            {
                map_name: {**entities, key: record},
                "order": [*state["order"], {"kind": kind, "id": entity_id, "runId": run_id}],
            },
        )

    entity = entities.get(key)
    if entity is None:
        return _reject(state, event, "missing_entity", msgs.msg_missing_entity(kind, entity_id))
    if entity["status"] in TERMINAL_STATUSES:
        return _reject(
            state,
            event,
            "invalid_transition",
            msgs.msg_terminal_entity(kind, entity_id, entity["status"]),
        )
    return _accept(state, event, {map_name: {**entities, key: follow_up(entity, event)}})
