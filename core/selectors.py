"""Selectors over a plain AgentState (reference ``agent/selectors``, phase 2)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.keys import entity_key

__all__ = [
    "parse_tool_arguments",
    "select_agent_timeline",
    "select_approval",
    "select_run",
    "select_running_runs",
    "select_tool_call",
]

_TIMELINE_MAPS = {"message": "messages", "reasoning": "reasoning", "tool": "toolCalls"}


def select_run(state: Mapping[str, Any], run_id: str) -> Any:
    return state["runs"].get(run_id)


def select_tool_call(state: Mapping[str, Any], run_id: str, tool_call_id: str) -> Any:
    return state["toolCalls"].get(entity_key(run_id, tool_call_id))


def select_approval(state: Mapping[str, Any], run_id: str, approval_id: str) -> Any:
    return state["approvals"].get(entity_key(run_id, approval_id))


def select_running_runs(state: Mapping[str, Any], session_id: str) -> list[Any]:
    """Runs of ``session_id`` whose status is ``running``."""
    return [
        run
        for run in state["runs"].values()
        if run.get("sessionId") == session_id and run.get("status") == "running"
    ]


def select_agent_timeline(
    state: Mapping[str, Any], run_id: str, *, include_reasoning: bool = True
) -> list[dict[str, Any]]:
    """``[{kind, entity}]`` of a run's messages, reasoning, tools and approvals, in ``order``.

    Redacted reasoning is shown with empty ``content``.
    """
    entries: list[dict[str, Any]] = []
    for ref in state["order"]:
        if ref.get("runId") != run_id:
            continue
        kind = ref.get("kind")
        if kind == "approval":
            map_name = "approvals"
        elif kind in _TIMELINE_MAPS:
            if kind == "reasoning" and not include_reasoning:
                continue
            map_name = _TIMELINE_MAPS[kind]
        else:
            continue
        entity = state[map_name].get(entity_key(ref["runId"], ref["id"]))
        if entity is None:
            continue
        if kind == "reasoning" and entity.get("redacted"):
            entity = {**entity, "content": ""}
        entries.append({"kind": kind, "entity": entity})
    return entries


def parse_tool_arguments(tool: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(ok, value)``: the tool's streamed ``arguments`` parsed as JSON (``""`` is ``{}``).

    The reducer keeps the raw text; parsing belongs to selectors. ``ok`` is False while the
    text is not (yet) valid JSON.
    """
    text = tool.get("arguments", "")
    if not isinstance(text, str):
        return False, None
    if not text.strip():
        return True, {}
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None
