"""Entity records: how a start event creates one and a follow-up event changes one.

Shared by the pure fold (``core.reducer``) and the store's indexed engine (``core.engine``) so
both store exactly the reference's fields (``reduceAgentState.ts``, phase 2). A JavaScript
``undefined`` field is an absent key here; ``a ?? b`` treats ``None`` and absent alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.kinds import START_STATUSES

__all__ = ["append_content", "follow_up", "start_entity"]

_MISSING: Any = object()


def _opt(record: dict[str, Any], key: str, source: Mapping[str, Any], skey: str) -> None:
    """``record[key] = source[skey]`` where an absent source key means "no key"."""
    value = source.get(skey, _MISSING)
    if value is _MISSING:
        record.pop(key, None)
    else:
        record[key] = value


def _coalesce(record: dict[str, Any], key: str, source: Mapping[str, Any], skey: str) -> None:
    """``record[key] = source[skey] ?? record[key]``."""
    value = source.get(skey)
    if value is not None:
        record[key] = value


def _base(event: Mapping[str, Any], entity_id: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": entity_id, "runId": event["runId"]}
    if "parentId" in event:
        record["parentId"] = event["parentId"]
    return record


def _stamp(record: dict[str, Any], status: str, event: Mapping[str, Any]) -> dict[str, Any]:
    record["status"] = status
    record["createdAt"] = event["timestamp"]
    record["updatedAt"] = event["timestamp"]
    if "meta" in event:
        record["meta"] = event["meta"]
    return record


def start_entity(kind: str, entity_id: str, event: Mapping[str, Any]) -> dict[str, Any]:
    """The record a start event creates (key order as the reference builds it)."""
    p: Mapping[str, Any] = event["payload"]
    record = _base(event, entity_id)
    if kind == "message":
        record["role"] = p["role"]
        content = p.get("content")
        record["content"] = "" if content is None else content
        return _stamp(record, START_STATUSES[kind], event)
    if kind == "reasoning":
        record["content"] = ""
        redacted = p.get("redacted")
        record["redacted"] = False if redacted is None else redacted
        return _stamp(record, START_STATUSES[kind], event)
    if kind == "tool":
        record["name"] = p["name"]
        args = p.get("arguments")
        record["arguments"] = "" if args is None else args
        _opt(record, "index", p, "index")
        attempt = p.get("attempt")
        record["attempt"] = 1 if attempt is None else attempt
        _opt(record, "retryOf", p, "retryOf")
        return _stamp(record, START_STATUSES[kind], event)
    if kind == "approval":
        for key in ("toolCallId", "description", "risk", "data", "editable", "expiresAt"):
            _opt(record, key, p, key)
        _opt(record, "version", p, "version")
        return _stamp(record, START_STATUSES[kind], event)
    if kind == "task":
        record["title"] = p["title"]
        _opt(record, "description", p, "description")
        return _stamp(record, START_STATUSES[kind], event)
    # artifact
    record["name"] = p["name"]
    _opt(record, "mediaType", p, "mediaType")
    _opt(record, "content", p, "content")
    return _stamp(record, START_STATUSES[kind], event)


def append_content(content: Any, delta: Any) -> Any:
    """``appendMessageContent``: strings concatenate, otherwise both become part lists."""
    if isinstance(content, str) and isinstance(delta, str):
        return content + delta
    left = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    right = [{"type": "text", "text": delta}] if isinstance(delta, str) else list(delta)
    return left + right


def follow_up(entity: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    """The new record after a follow-up event on a non-terminal entity (never mutates)."""
    etype: str = event["type"]
    p: Mapping[str, Any] = event["payload"]
    family, _, action = etype.partition(".")
    record = dict(entity)
    if action == "failed":
        record["error"] = p["error"]
        record["status"] = "failed"
    elif action == "cancelled":
        _opt(record, "reason", p, "reason")
        record["status"] = "cancelled"
    elif family == "message":
        if action == "delta":
            record["content"] = append_content(record["content"], p["delta"])
        else:  # completed
            _coalesce(record, "content", p, "content")
            record["status"] = "completed"
    elif family == "reasoning":
        if action == "delta":
            record["content"] = record["content"] + p["delta"]
        else:  # completed
            _coalesce(record, "content", p, "content")
            _opt(record, "summary", p, "summary")
            record["status"] = "completed"
    elif family == "tool":
        if action == "arguments_delta":
            record["arguments"] = record["arguments"] + p["delta"]
        elif action == "running":
            record["status"] = "running"
        else:  # completed
            _opt(record, "result", p, "result")
            record["status"] = "completed"
    elif family == "approval":  # resolved
        record["decision"] = p["decision"]
        _coalesce(record, "data", p, "data")
        record["status"] = "completed"
    elif family == "task":
        if action == "updated":
            _coalesce(record, "title", p, "title")
            _coalesce(record, "description", p, "description")
            _coalesce(record, "progress", p, "progress")
            record["status"] = "running"
        else:  # completed
            _opt(record, "result", p, "result")
            record["status"] = "completed"
    else:  # artifact
        if action == "updated":
            record["content"] = p["content"]
            _coalesce(record, "version", p, "version")
        else:  # completed
            _coalesce(record, "content", p, "content")
            _coalesce(record, "version", p, "version")
            record["status"] = "completed"
    record["updatedAt"] = event["timestamp"]
    return record
