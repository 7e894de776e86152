"""The events that end a run whose owner was lost (its lease expired while it was running).

Every entity of the run still open is closed by the "error" column of the closure table
(protocol.md §6), in reverse order of opening, then ``run.failed`` with the error
``gateway_instance_lost`` (``retryable: true``). Sequences continue the run's own numbering.
A run that held the slot but logged nothing yet (its owner died, or was fenced, before its first
append) was accepted all the same: it gets ``run.started`` first, so its 202 still ends in
exactly one terminal event.
"""

from __future__ import annotations

import time
from typing import Any

from core import entity_key
from core.kinds import ENTITY_MAPS, ID_FIELDS, TERMINAL_STATUSES

LOST_ERROR: dict[str, Any] = {
    "code": "gateway_instance_lost",
    "message": "The gateway instance running this run was lost.",
    "retryable": True,
}


def _close(kind: str, entity_id: str) -> tuple[str, dict[str, Any]]:
    id_field = ID_FIELDS[kind]
    if kind == "approval":
        return "approval.resolved", {id_field: entity_id, "decision": "expired"}
    return f"{kind}.failed", {id_field: entity_id, "error": dict(LOST_ERROR)}


def lost_run_events(
    state: dict[str, Any], run_id: str, now_ms: float | None = None, session_id: str | None = None
) -> list[dict[str, Any]]:
    """Closure + ``run.failed`` for ``run_id`` if it is still running in ``state``; else [].
    A run absent from ``state`` is started first when ``session_id`` (the conversation's) is
    given."""
    run = state.get("runs", {}).get(run_id)
    if run is None and session_id is None:
        return []
    if run is not None and run.get("status") != "running":
        return []
    session_id = run["sessionId"] if run is not None else session_id
    sequence = int(state.get("lastSequenceByRun", {}).get(run_id, -1))
    timestamp = time.time() * 1000 if now_ms is None else now_ms
    events: list[dict[str, Any]] = []

    def emit(type_: str, payload: dict[str, Any]) -> None:
        nonlocal sequence
        sequence += 1
        events.append(
            {
                "protocolVersion": "0.1",
                "type": type_,
                "eventId": f"{run_id}:{sequence}:{type_}",
                "sessionId": session_id,
                "runId": run_id,
                "sequence": sequence,
                "timestamp": timestamp,
                "payload": payload,
            }
        )

    if run is None:
        emit("run.started", {})
    for item in reversed(state.get("order", [])):
        if item.get("runId") != run_id or item.get("kind") not in ENTITY_MAPS:
            continue
        kind, entity_id = item["kind"], item["id"]
        entity = state.get(ENTITY_MAPS[kind], {}).get(entity_key(run_id, entity_id))
        if entity is None or entity.get("status") in TERMINAL_STATUSES:
            continue
        emit(*_close(kind, entity_id))
    emit("run.failed", {"error": dict(LOST_ERROR)})
    return events
