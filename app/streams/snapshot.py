"""The snapshot object of http-api.md: projection + reduced state + cursor (+ extensions)."""

from __future__ import annotations

from typing import Any

import orjson

from app.backends import EMPTY_CURSOR, Snapshot
from core import create_agent_state, is_requesting, project_messages

__all__ = [
    "active_run_id",
    "snapshot_object",
    "snapshot_sse",
    "snapshot_sse_parts",
    "snapshot_ws",
]


def active_run_id(state: dict[str, Any]) -> str | None:
    """The most recently created run that is still running."""
    running = [run for run in state.get("runs", {}).values() if run.get("status") == "running"]
    return running[-1]["id"] if running else None


def snapshot_object(key: str, snapshot: Snapshot | None) -> dict[str, Any]:
    """The snapshot of ``key``; the empty snapshot when the conversation does not exist."""
    if snapshot is None:
        state: dict[str, Any] = dict(create_agent_state())
        cursor, extensions = EMPTY_CURSOR, {}
    else:
        state, cursor, extensions = snapshot.state, snapshot.cursor, snapshot.extensions
    body: dict[str, Any] = {
        "conversationKey": key,
        "cursor": cursor,
        "isRequesting": is_requesting(state),
        "activeRunId": active_run_id(state),
        "messages": project_messages(state),
        "agentState": state,
    }
    if extensions:
        body["extensions"] = extensions
    return body


def snapshot_sse(body: dict[str, Any], retry_ms: int | None = None) -> bytes:
    return b"".join(snapshot_sse_parts(body, retry_ms))


def snapshot_sse_parts(
    body: dict[str, Any], retry_ms: int | None = None
) -> tuple[bytes, bytes, bytes]:
    """The SSE snapshot frame as (lines before the data, the JSON, the frame's end): a large
    snapshot is sent from its JSON as serialized, never copied whole into one frame."""
    retry = b"" if retry_ms is None else b"retry: %d\n" % retry_ms
    head = b"%sevent: snapshot\nid: %s\ndata: " % (retry, body["cursor"].encode())
    return head, orjson.dumps(body), b"\n\n"


def snapshot_ws(body: dict[str, Any]) -> str:
    return orjson.dumps({"type": "snapshot", **body}).decode()
