"""What a gateway run still has open, and whether it now waits on the client alone.

A run waits on the client when everything it opened is closed but tool calls handed to the
app (``tool.running`` with ``meta.executor = "app"``) and waiting approvals, at least one of
those is open, and none of the answers this request delivered is still unreflected. The
runner's own ``waiting`` flag (``app/runs/execute.py``) confirms it on the owning instance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.agui.encoder import WaitingOn
from core.runs import RUN_TERMINAL_TYPES

__all__ = ["RunTracker"]

_KINDS = {
    "message": "messageId",
    "reasoning": "reasoningId",
    "tool": "toolCallId",
    "approval": "approvalId",
    "task": "taskId",
    "artifact": "artifactId",
}
_STARTS = {
    "message.started": "streaming",
    "reasoning.started": "streaming",
    "tool.requested": "pending",
    "approval.requested": "waiting",
    "task.created": "pending",
    "artifact.created": "streaming",
}
_TABLES = {
    "messages": "message",
    "reasoning": "reasoning",
    "toolCalls": "tool",
    "approvals": "approval",
    "tasks": "task",
    "artifacts": "artifact",
}
_CLOSED = frozenset({"completed", "failed", "cancelled"})


class RunTracker:
    def __init__(self, run_id: str, state: dict[str, Any], answered: Iterable[str] = ()) -> None:
        self.run_id = run_id
        self.ended = False
        #: (kind, id) -> the open entity's fields that matter here.
        self._open: dict[tuple[str, str], dict[str, Any]] = {}
        self._order: list[tuple[str, str]] = []
        self._answered = set(answered)
        run = state.get("runs", {}).get(run_id)
        if run is not None and run.get("status") != "running":
            self.ended = True
        for table, kind in _TABLES.items():
            for entity in state.get(table, {}).values():
                if entity.get("runId") == run_id and entity.get("status") not in _CLOSED:
                    self._remember(kind, dict(entity))

    def _remember(self, kind: str, entity: dict[str, Any]) -> None:
        key = (kind, str(entity["id"]))
        if key not in self._open:
            self._order.append(key)
        self._open[key] = entity

    def observe(self, event: dict[str, Any]) -> None:
        kind_name = str(event.get("type"))
        if kind_name in RUN_TERMINAL_TYPES:
            self.ended = True
            return
        kind, _, verb = kind_name.partition(".")
        field = _KINDS.get(kind)
        if field is None:
            return
        payload = event.get("payload") or {}
        ident = str(payload.get(field))
        key = (kind, ident)
        if kind_name in _STARTS:
            entity = {**payload, "id": ident, "status": _STARTS[kind_name]}
            if event.get("meta") is not None:
                entity["meta"] = event["meta"]
            self._remember(kind, entity)
        elif kind_name == "approval.resolved" or verb in _CLOSED:
            self._open.pop(key, None)
            self._answered.discard(ident)
        elif key in self._open:
            if verb == "running":
                self._open[key]["status"] = "running"
            elif kind == "task" and verb == "updated":
                self._open[key]["status"] = "running"

    def waiting_on(self) -> WaitingOn | None:
        """What the run waits for, when it waits on the client alone (else None)."""
        if self.ended:
            return None
        tools: list[str] = []
        approvals: list[dict[str, Any]] = []
        for key in self._order:
            entity = self._open.get(key)
            if entity is None:
                continue
            kind, ident = key
            if ident in self._answered:
                return None  # an answer of this request is not reflected yet
            if kind == "approval" and entity.get("status") == "waiting":
                approvals.append(entity)
            elif kind == "tool" and entity.get("status") == "running" and _for_app(entity):
                tools.append(ident)
            else:
                return None
        self._order = [key for key in self._order if key in self._open]
        if not tools and not approvals:
            return None
        return WaitingOn(tools, approvals)


def _for_app(entity: dict[str, Any]) -> bool:
    meta = entity.get("meta")
    return isinstance(meta, dict) and meta.get("executor") == "app"
