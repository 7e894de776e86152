"""Re-stamping AgentEvents from another run (a recording, a native upstream) into ours.

``Restamper.apply(event, ctx)`` validates one upstream AgentEvent and re-emits it through the
run's context, so it gets the gateway's session/run ids and sequence; the upstream ids go into
``meta.upstream`` (``{eventId, sessionId, runId, sequence}``). Anything invalid raises
:class:`UpstreamProtocolError`: an invalid envelope or payload, an event of another upstream
run, a follow-up for an entity that is not open, a duplicate start, anything after the
upstream's run terminal.

The upstream's ``session.started`` / ``run.started`` are absorbed (the gateway emitted its
own), its user messages are skipped (the gateway emitted the user's turn), and its run
terminal ends our run through the closure table (``finish`` / ``fail`` / ``cancel``); its
``run.failed`` error becomes ``upstream_error`` with the upstream's code in ``details``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.events import validate_event
from core.kinds import EVENT_ENTITY_KIND, ID_FIELDS, START_TYPES
from providers.context import RunContext
from providers.errors import UpstreamError, UpstreamProtocolError

__all__ = ["Restamper"]


class Restamper:
    __slots__ = ("run_id", "skipped", "terminated")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.skipped: set[str] = set()
        self.terminated = False

    def apply(self, event: Any, ctx: RunContext) -> None:
        problem = validate_event(event)
        if problem is not None:
            raise UpstreamProtocolError(
                f"The upstream sent an invalid AgentEvent: {problem}",
                details={"reason": str(problem)},
            )
        if self.terminated:
            raise UpstreamProtocolError("The upstream sent an event after its run terminal.")
        if self.run_id is None:
            self.run_id = event["runId"]
        elif event["runId"] != self.run_id:
            raise UpstreamProtocolError("The upstream mixed events of several runs.")
        kind: str = event["type"]
        payload: Mapping[str, Any] = event["payload"]
        upstream = {
            "eventId": event["eventId"],
            "sessionId": event["sessionId"],
            "runId": event["runId"],
            "sequence": event["sequence"],
        }
        meta = {**event.get("meta", {}), "upstream": upstream}
        if kind in ("session.started", "run.started"):
            return
        if kind == "run.completed":
            self.terminated = True
            ctx.finish(payload.get("output"), payload.get("usage"))
            return
        if kind == "run.failed":
            self.terminated = True
            ctx.fail(_upstream_error(payload["error"]))
            return
        if kind == "run.cancelled":
            self.terminated = True
            ctx.cancel(payload.get("reason") or "aborted")
            return
        entity_kind = EVENT_ENTITY_KIND[kind]
        ident = payload[ID_FIELDS[entity_kind]]
        if kind in START_TYPES:
            if kind == "message.started" and payload.get("role") == "user":
                self.skipped.add(ident)
                return
            if ctx.is_open(entity_kind, ident) or (
                entity_kind == "tool" and ctx.tool(ident) is not None
            ):
                raise UpstreamProtocolError(f'The upstream started {entity_kind} "{ident}" twice.')
        elif entity_kind == "message" and ident in self.skipped:
            return
        elif not ctx.is_open(entity_kind, ident):
            raise UpstreamProtocolError(
                f'The upstream sent "{kind}" for {entity_kind} "{ident}", which is not open.'
            )
        ctx.emit(kind, payload, parent_id=event.get("parentId"), meta=meta)


def _upstream_error(error: Mapping[str, Any]) -> UpstreamError:
    """The upstream's own run error, as ``upstream_error`` with its code in ``details``."""
    details: dict[str, Any] = {}
    if "code" in error:
        details["code"] = error["code"]
    if "details" in error:
        details["details"] = error["details"]
    return UpstreamError(
        str(error.get("message") or ""),
        details=details or None,
        retryable=error.get("retryable") if isinstance(error.get("retryable"), bool) else None,
    )
