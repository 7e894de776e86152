"""Build the AG-UI ``RunAgentInput`` with the ``ag-ui-protocol`` models.

``threadId`` is the conversation (kept in the provider transcript), ``runId`` is one per
upstream request (a continuation gets a new one, with ``parentRunId``), ``messages`` come from
the gateway history, ``tools`` from ``input.tools``, ``state`` from the latest shared state,
``forwardedProps`` from ``input.forwardedProps`` / ``params``, and ``resume`` answers the
interrupts of the previous upstream run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    FunctionCall,
    ResumeEntry,
    RunAgentInput,
    SystemMessage,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["build_run_agent_input", "history_to_agui", "tools_to_agui"]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return orjson.dumps(content).decode()


def _message(entry: Mapping[str, Any], ident: str) -> Any:
    role = entry.get("role")
    content = _text(entry.get("content"))
    if role == "assistant":
        calls = [
            ToolCall(
                id=str(call["id"]),
                function=FunctionCall(
                    name=str(call["name"]), arguments=call.get("arguments") or "{}"
                ),
            )
            for call in entry.get("toolCalls") or []
        ]
        return AssistantMessage(id=ident, content=content or None, tool_calls=calls or None)
    if role == "tool":
        return ToolMessage(id=ident, content=content, tool_call_id=str(entry.get("toolCallId", "")))
    if role == "system":
        return SystemMessage(id=ident, content=content)
    if role == "developer":
        return DeveloperMessage(id=ident, content=content)
    return UserMessage(id=ident, content=content)


def history_to_agui(history: Sequence[Mapping[str, Any]], prefix: str) -> list[Any]:
    return [_message(entry, f"{prefix}-{index}") for index, entry in enumerate(history)]


def tools_to_agui(tools: Sequence[Mapping[str, Any]]) -> list[Tool]:
    return [
        Tool(
            name=str(tool["name"]),
            description=str(tool.get("description") or ""),
            parameters=tool.get("parameters"),
        )
        for tool in tools
    ]


def build_run_agent_input(
    *,
    thread_id: str,
    run_id: str,
    history: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    state: Any = None,
    forwarded_props: Any = None,
    context: Sequence[Mapping[str, Any]] | None = None,
    parent_run_id: str | None = None,
    resume: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The wire JSON (camelCase, no ``null`` for absent fields) of a ``RunAgentInput``."""
    model = RunAgentInput(
        thread_id=thread_id,
        run_id=run_id,
        parent_run_id=parent_run_id,
        state=state,
        messages=history_to_agui(history, thread_id),  # position ids: stable across requests
        tools=tools_to_agui(tools),
        context=[dict(item) for item in context] if context else None,
        forwarded_props=forwarded_props,
        resume=[ResumeEntry.model_validate(dict(entry)) for entry in resume] if resume else None,
    )
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return dumped
