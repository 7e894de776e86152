"""A deliberately naive fold written from protocol.md §3-4, used as the tests' oracle.

It deep-copies the whole state for every event and keeps no indexes; it shares no code with
``core`` except the validity check (which has its own tests) and the JS number formatting of
issue messages.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from core.events import validate_event
from core.jsnum import js_number_str

KINDS = {
    "message": ("messages", "messageId", "Message"),
    "reasoning": ("reasoning", "reasoningId", "Reasoning"),
    "tool": ("toolCalls", "toolCallId", "Tool call"),
    "approval": ("approvals", "approvalId", "Approval"),
    "task": ("tasks", "taskId", "Task"),
    "artifact": ("artifacts", "artifactId", "Artifact"),
}
STARTS = {
    "message.started": "message",
    "reasoning.started": "reasoning",
    "tool.requested": "tool",
    "approval.requested": "approval",
    "task.created": "task",
    "artifact.created": "artifact",
}


def empty() -> dict[str, Any]:
    state: dict[str, Any] = {name: {} for name in ("sessions", "runs")}
    state.update({spec[0]: {} for spec in KINDS.values()})
    state.update({"order": [], "issues": [], "processedEventIds": {}, "lastSequenceByRun": {}})
    return state


def js_len(text: str) -> int:
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)


def key_of(run_id: str, entity_id: str) -> str:
    return f"{js_len(run_id)}:{run_id}{entity_id}"


def naive_fold(events: Iterable[Mapping[str, Any]], state: dict[str, Any] | None = None) -> Any:
    result = empty() if state is None else copy.deepcopy(state)
    for event in events:
        if validate_event(event) is None:
            result = _step(copy.deepcopy(result), copy.deepcopy(dict(event)))
    return result


def _kind_of(etype: str) -> str:
    family = etype.split(".")[0]
    return {"message": "message", "reasoning": "reasoning", "tool": "tool"}.get(family, family)


def _step(s: dict[str, Any], e: dict[str, Any]) -> dict[str, Any]:
    run_id, etype, p, ts = e["runId"], e["type"], e["payload"], e["timestamp"]
    ekey = key_of(run_id, e["eventId"])
    if ekey in s["processedEventIds"]:
        return s

    def issue(code: str, message: str) -> dict[str, Any]:
        s["processedEventIds"][ekey] = True
        s["issues"].append(
            {"code": code, "eventId": e["eventId"], "runId": run_id, "message": message}
        )
        return s

    def ok() -> dict[str, Any]:
        s["processedEventIds"][ekey] = True
        s["lastSequenceByRun"][run_id] = e["sequence"]
        return s

    last = s["lastSequenceByRun"].get(run_id)
    if last is not None and e["sequence"] <= last:
        return issue(
            "invalid_sequence",
            f"Sequence {js_number_str(e['sequence'])} must be greater than "
            f'{js_number_str(last)} for run "{run_id}".',
        )
    run = s["runs"].get(run_id)
    mismatch = (
        f'Run "{run_id}" belongs to session "{run["sessionId"]}", not "{e["sessionId"]}".'
        if run
        else ""
    )
    if run and run["sessionId"] != e["sessionId"] and etype != "session.started":
        return issue("invalid_transition", mismatch)
    if run and run["status"] != "running" and etype not in ("session.started", "run.started"):
        return issue("invalid_transition", f'Run "{run_id}" is already {run["status"]}.')

    def opt(target: dict[str, Any], name: str, source: str | None = None) -> None:
        if (source or name) in p:
            target[name] = p[source or name]
        else:
            target.pop(name, None)

    if etype == "session.started":
        if e["sessionId"] in s["sessions"]:
            return issue("duplicate_entity", f'Session "{e["sessionId"]}" already exists.')
        session: dict[str, Any] = {"id": e["sessionId"]}
        opt(session, "title")
        session["createdAt"] = ts
        s["sessions"][e["sessionId"]] = session
        return ok()
    if etype == "run.started":
        if run:
            return issue("duplicate_entity", f'Run "{run_id}" already exists.')
        new_run: dict[str, Any] = {"id": run_id, "sessionId": e["sessionId"], "status": "running"}
        opt(new_run, "input")
        new_run.update(createdAt=ts, updatedAt=ts)
        s["runs"][run_id] = new_run
        return ok()

    def need_run() -> dict[str, Any] | None:
        if not run:
            return issue("missing_run", f'Run "{run_id}" must be started before "{etype}".')
        if run["sessionId"] != e["sessionId"]:
            return issue("invalid_transition", mismatch)
        return None

    if etype.startswith("run."):
        if need_run() is not None:
            return s
        assert run is not None
        run["status"] = etype[4:]
        fields = {"run.completed": ["output", "usage"], "run.failed": ["error"]}.get(
            etype, ["reason"]
        )
        for name in fields:
            opt(run, name)
        run["updatedAt"] = ts
        return ok()

    kind = STARTS.get(etype) or _kind_of(etype)
    map_name, id_field, label = KINDS[kind]
    entity_id = p[id_field]
    key = key_of(run_id, entity_id)
    entities = s[map_name]
    if etype in STARTS:
        if need_run() is not None:
            return s
        if key in entities:
            return issue("duplicate_entity", f'{label} "{entity_id}" already exists.')
        ent: dict[str, Any] = {"id": entity_id, "runId": run_id}
        if "parentId" in e:
            ent["parentId"] = e["parentId"]
        status = {"tool": "pending", "approval": "waiting", "task": "pending"}.get(
            kind, "streaming"
        )
        if kind == "message":
            ent.update(role=p["role"], content=p.get("content", ""))
        elif kind == "reasoning":
            ent.update(content="", redacted=p.get("redacted", False))
        elif kind == "tool":
            ent.update(name=p["name"], arguments=p.get("arguments", ""))
            opt(ent, "index")
            ent["attempt"] = p.get("attempt", 1)
            opt(ent, "retryOf")
        elif kind == "approval":
            for name in ("toolCallId", "description", "risk", "data", "editable"):
                opt(ent, name)
            opt(ent, "expiresAt")
            opt(ent, "version")
        elif kind == "task":
            ent["title"] = p["title"]
            opt(ent, "description")
        else:
            ent["name"] = p["name"]
            opt(ent, "mediaType")
            opt(ent, "content")
        ent.update(status=status, createdAt=ts, updatedAt=ts)
        if "meta" in e:
            ent["meta"] = e["meta"]
        entities[key] = ent
        s["order"].append({"kind": kind, "id": entity_id, "runId": run_id})
        return ok()

    ent = entities.get(key)
    if ent is None:
        return issue("missing_entity", f'{label} "{entity_id}" does not exist.')
    if ent["status"] in ("completed", "failed", "cancelled"):
        if kind == "approval":
            return issue("invalid_transition", f'Approval "{entity_id}" is already resolved.')
        return issue("invalid_transition", f'{label} "{entity_id}" is already {ent["status"]}.')

    def coalesce(name: str) -> None:
        if p.get(name) is not None:
            ent[name] = p[name]

    action = etype.split(".", 1)[1]
    if action == "failed":
        ent.update(error=p["error"], status="failed")
    elif action == "cancelled":
        opt(ent, "reason")
        ent["status"] = "cancelled"
    elif etype == "message.delta":
        old, delta = ent["content"], p["delta"]
        if isinstance(old, str) and isinstance(delta, str):
            ent["content"] = old + delta
        else:

            def parts(value: Any) -> list[Any]:
                return [{"type": "text", "text": value}] if isinstance(value, str) else value

            ent["content"] = parts(old) + parts(delta)
    elif etype in ("reasoning.delta",):
        ent["content"] += p["delta"]
    elif etype == "tool.arguments_delta":
        ent["arguments"] += p["delta"]
    elif etype == "tool.running":
        ent["status"] = "running"
    elif etype == "approval.resolved":
        ent["decision"] = p["decision"]
        coalesce("data")
        ent["status"] = "completed"
    elif etype == "task.updated":
        for name in ("title", "description", "progress"):
            coalesce(name)
        ent["status"] = "running"
    elif etype == "artifact.updated":
        ent["content"] = p["content"]
        coalesce("version")
    else:  # *.completed
        if kind in ("message", "reasoning", "artifact"):
            coalesce("content")
        if kind == "reasoning":
            opt(ent, "summary")
        if kind in ("tool", "task"):
            opt(ent, "result")
        if kind == "artifact":
            coalesce("version")
        ent["status"] = "completed"
    ent["updatedAt"] = ts
    return ok()
