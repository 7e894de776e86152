"""Build an Anthropic Messages streaming request from the gateway's history and input.

Thinking blocks must go back unchanged (signature included) during a tool loop and on later
turns; the state keeps only their text, so the raw assistant blocks live in the provider
transcript (``assistantTurns``) and are looked up by the assistant entry's tool call ids or text.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import orjson

from providers.model_calls import content_text

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "build_messages_request",
    "content_to_anthropic",
    "history_to_anthropic",
    "remember_assistant_turn",
    "tool_result_block",
    "tools_to_anthropic",
]

DEFAULT_MAX_TOKENS = 4096
_TRANSCRIPT_TURNS = 64
_TOOL_BLOCKS = ("tool_use", "server_tool_use")


def _source(part: Mapping[str, Any]) -> dict[str, Any] | None:
    if part.get("url"):
        return {"type": "url", "url": part["url"]}
    if part.get("data") is not None:
        return {
            "type": "base64",
            "media_type": part.get("mediaType", "application/octet-stream"),
            "data": part["data"],
        }
    return None


def content_to_anthropic(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "text":
                blocks.append({"type": "text", "text": part.get("text", "")})
            elif kind in ("image", "file") and (source := _source(part)) is not None:
                blocks.append(
                    {"type": "image" if kind == "image" else "document", "source": source}
                )
    elif content is not None:
        blocks.append({"type": "text", "text": content_text(content)})
    return blocks


def _parse_input(arguments: str | None) -> Any:
    if not arguments:
        return {}
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}


def tool_result_block(tool_use_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content_text(content),
    }
    if is_error:
        block["is_error"] = True
    return block


def remember_assistant_turn(
    transcript: MutableMapping[str, Any], blocks: Sequence[Mapping[str, Any]]
) -> None:
    """Keep an assistant turn's raw blocks so later requests send them back unchanged."""
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    tool_ids = [str(b["id"]) for b in blocks if b.get("type") in _TOOL_BLOCKS and b.get("id")]
    turns = transcript.setdefault("assistantTurns", [])
    turns.append({"text": text, "toolIds": tool_ids, "content": [dict(b) for b in blocks]})
    del turns[:-_TRANSCRIPT_TURNS]
    server = [str(b["id"]) for b in blocks if b.get("type") == "server_tool_use" and b.get("id")]
    if server:
        known = transcript.setdefault("serverToolIds", [])
        known.extend(server)
        del known[: -_TRANSCRIPT_TURNS * 4]


def _raw_turn(
    transcript: Mapping[str, Any], text: str, tool_ids: Sequence[str]
) -> list[dict[str, Any]] | None:
    for turn in reversed(transcript.get("assistantTurns") or []):
        if not isinstance(turn, Mapping):
            continue
        ids = turn.get("toolIds") or []
        matched = (
            bool(set(ids) & set(tool_ids)) if tool_ids else (not ids and turn.get("text") == text)
        )
        if matched:
            return [dict(block) for block in turn.get("content") or []]
    return None


def _assistant_blocks(
    entry: Mapping[str, Any], transcript: Mapping[str, Any]
) -> list[dict[str, Any]]:
    calls = entry.get("toolCalls") or []
    text = content_text(entry.get("content"))
    raw = _raw_turn(transcript, text, [str(c["id"]) for c in calls])
    if raw is not None:
        return raw
    blocks = content_to_anthropic(entry.get("content"))
    for call in calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["name"],
                "input": _parse_input(call.get("arguments")),
            }
        )
    return blocks


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def history_to_anthropic(
    history: Sequence[Mapping[str, Any]], transcript: Mapping[str, Any]
) -> tuple[list[str], list[dict[str, Any]]]:
    """Return (system texts, alternating messages); consecutive same-role turns are merged."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    server_tools = set(transcript.get("serverToolIds") or [])
    for entry in history:
        role = entry.get("role")
        if role in ("system", "developer"):
            system.append(content_text(entry.get("content")))
        elif role == "assistant":
            _append(messages, "assistant", _assistant_blocks(entry, transcript))
        elif role == "tool":
            if entry.get("toolCallId") in server_tools:
                continue  # its result block is part of the assistant turn already
            block = tool_result_block(str(entry.get("toolCallId", "")), entry.get("content"))
            _append(messages, "user", [block])
        elif role == "user":
            _append(messages, "user", content_to_anthropic(entry.get("content")))
    return system, messages


def tools_to_anthropic(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for tool in tools:
        item: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            item["description"] = tool["description"]
        item["input_schema"] = tool.get("parameters") or {"type": "object", "properties": {}}
        converted.append(item)
    return converted


def build_messages_request(
    *,
    model: str | None,
    history: Sequence[Mapping[str, Any]],
    transcript: Mapping[str, Any],
    user_content: Any = None,
    turn_messages: Sequence[Mapping[str, Any]] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    system, messages = history_to_anthropic(history, transcript)
    if user_content is not None:
        blocks = content_to_anthropic(user_content)
        last = messages[-1] if messages else None
        if not (last and last["role"] == "user" and last["content"][-len(blocks) :] == blocks):
            _append(messages, "user", blocks)
    for message in turn_messages:
        _append(messages, str(message["role"]), [dict(b) for b in message["content"]])
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    body["max_tokens"] = DEFAULT_MAX_TOKENS
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = messages
    if tools:
        body["tools"] = tools_to_anthropic(tools)
    body.update(params or {})
    body["stream"] = True
    return body
