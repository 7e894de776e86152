"""Build an OpenAI Chat Completions streaming request from the gateway's history and input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from providers.model_calls import content_text

__all__ = [
    "assistant_message",
    "build_chat_request",
    "content_to_openai",
    "history_to_openai",
    "tool_message",
    "tools_to_openai",
]


def _part_to_openai(part: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text", "")}
    if kind == "image":
        url = part.get("url")
        if not url and part.get("data") is not None:
            url = f"data:{part.get('mediaType', 'image/png')};base64,{part['data']}"
        return {"type": "image_url", "image_url": {"url": url}} if url else None
    if kind == "file" and part.get("data") is not None:
        file: dict[str, Any] = {"file_data": part["data"]}
        if part.get("name"):
            file["filename"] = part["name"]
        return {"type": "file", "file": file}
    return None


def content_to_openai(content: Any) -> str | list[dict[str, Any]]:
    """A string stays a string; parts become OpenAI content parts (unknown kinds are skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            converted
            for part in content
            if isinstance(part, Mapping) and (converted := _part_to_openai(part)) is not None
        ]
        return parts
    return content_text(content)


def assistant_message(content: Any, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    text = content_text(content)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not tool_calls else None,
    }
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call.get("arguments") or "{}"},
            }
            for call in tool_calls
        ]
    return message


def tool_message(tool_call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content_text(content)}


def history_to_openai(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for entry in history:
        role = entry.get("role")
        if role == "tool":
            messages.append(tool_message(str(entry.get("toolCallId", "")), entry.get("content")))
        elif role == "assistant":
            messages.append(assistant_message(entry.get("content"), entry.get("toolCalls") or []))
        elif isinstance(role, str):
            message: dict[str, Any] = {
                "role": role,
                "content": content_to_openai(entry.get("content", "")),
            }
            if entry.get("name"):
                message["name"] = entry["name"]
            messages.append(message)
    return messages


def tools_to_openai(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        converted.append({"type": "function", "function": function})
    return converted


def build_chat_request(
    *,
    model: str | None,
    history: Sequence[Mapping[str, Any]],
    user_content: Any = None,
    turn_messages: Sequence[Mapping[str, Any]] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """History, then this run's user turn, then the messages of this run's earlier model calls."""
    messages = history_to_openai(history)
    if user_content is not None:
        user = {"role": "user", "content": content_to_openai(user_content)}
        if not messages or messages[-1] != user:
            messages.append(user)
    messages.extend(dict(message) for message in turn_messages)
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    body["messages"] = messages
    if tools:
        body["tools"] = tools_to_openai(tools)
    body.update(params or {})
    body["stream"] = True
    stream_options = dict(body.get("stream_options") or {})
    stream_options["include_usage"] = True
    body["stream_options"] = stream_options
    return body
