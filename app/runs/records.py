"""One run's record (``GET …/runs/{runId}``) and the long-poll until it ends (``…/wait``)."""

from __future__ import annotations

import asyncio
from typing import Any

from app import errors
from app.backends import ConversationRef
from app.gateway import Gateway

__all__ = ["TERMINAL_STATUSES", "run_record", "wait_for_run"]

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
#: How often a long-poll re-reads a queued run's record (it may lapse with its instance).
QUEUED_RECHECK_SECONDS = 1.0
_FIELDS = (
    "sessionId",
    "status",
    "input",
    "output",
    "usage",
    "error",
    "reason",
    "createdAt",
    "updatedAt",
)


async def run_record(gateway: Gateway, ref: ConversationRef, run_id: str) -> dict[str, Any]:
    """The run as the state holds it; ``queued`` for a run accepted but not started yet."""
    snapshot = await gateway.find_snapshot(ref)  # live, else archived
    if snapshot is None:
        raise errors.ConversationNotFound("No such conversation.")
    run = snapshot.state.get("runs", {}).get(run_id)
    record: dict[str, Any] = {"conversationKey": ref.key, "runId": run_id}
    if run is not None:
        record.update({key: run[key] for key in _FIELDS if key in run})
        return record
    # Accepted here, or (several instances) queued on another one: the backend's queue.
    if gateway.runs.is_pending(ref, run_id) or await gateway.backend.is_queued(ref, run_id):
        record.update({"sessionId": snapshot.meta.session_id, "status": "queued"})
        return record
    raise errors.RunNotFound(f"No run {run_id} in this conversation.")


async def wait_for_run(
    gateway: Gateway, ref: ConversationRef, run_id: str, within: float
) -> dict[str, Any]:
    """The record once the run has ended, or as it is when ``within`` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    cursor = await gateway.backend.head_cursor(ref)
    record = await run_record(gateway, ref, run_id)
    while record["status"] not in TERMINAL_STATUSES:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        # A queued run is re-read every few seconds: its instance may die before it starts.
        queued = record["status"] == "queued"
        wait = min(remaining, QUEUED_RECHECK_SECONDS) if queued else remaining
        result = await gateway.backend.read(ref, cursor, limit=256, wait=wait)
        if result.status != "ok":  # trimmed or deleted: re-read the head
            cursor = await gateway.backend.head_cursor(ref)
        elif result.entries:
            cursor = result.entries[-1].cursor
            ended = any(e.is_run_terminal and e.run_id == run_id for e in result.entries)
            if not ended and not queued:
                continue
        record = await run_record(gateway, ref, run_id)
    return record
