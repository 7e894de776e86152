"""Build a stateless Responses API request (``store: false``) from the gateway's history.

The gateway keeps the conversation, so every request carries it whole in ``input``. The state
holds only the text of reasoning, while OpenAI needs the reasoning items back with their
``encrypted_content``: each model call's final output items are kept in the provider transcript
(``responseTurns``), found again by the assistant entry's tool call ids (or its text), and sent
back unchanged. An entry with no kept turn is rebuilt from the history (text and function calls;
its reasoning cannot be, as only OpenAI can produce encrypted reasoning).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import orjson

from providers.model_calls import content_text
from providers.openai_responses.mapping import SERVER_TOOLS, item_parts

__all__ = [
    "ENCRYPTED_REASONING",
    "build_responses_request",
    "call_output_item",
    "content_to_responses",
    "history_to_input",
    "remember_response_turn",
    "tools_to_responses",
]

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_TEXT_OUTPUT_CALLS = ("function_call", "custom_tool_call")
_TRANSCRIPT_TURNS = 64


def _part_to_responses(part: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image":
        url = part.get("url")
        if not url and part.get("data") is not None:
            url = f"data:{part.get('mediaType', 'image/png')};base64,{part['data']}"
        return {"type": "input_image", "image_url": url} if url else None
    if kind == "file":
        if part.get("url"):
            return {"type": "input_file", "file_url": part["url"]}
        if part.get("data") is not None:
            media = part.get("mediaType", "application/octet-stream")
            file = {"type": "input_file", "file_data": f"data:{media};base64,{part['data']}"}
            if part.get("name"):
                file["filename"] = part["name"]
            return file
    return None


def content_to_responses(content: Any) -> list[dict[str, Any]]:
    """User content as Responses input parts (unknown part kinds are skipped)."""
    if isinstance(content, list):
        return [
            converted
            for part in content
            if isinstance(part, Mapping) and (converted := _part_to_responses(part)) is not None
        ]
    text = content_text(content)
    return [{"type": "input_text", "text": text}] if text else []


def function_call_item(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": str(call.get("id", "")),
        "name": str(call.get("name", "")),
        "arguments": call.get("arguments") or "{}",
    }


def call_output_item(
    call_id: str, content: Any, call_type: str = "function_call"
) -> dict[str, Any]:
    """The result of a call the app executed: ``function_call_output`` (text), or the matching
    ``*_call_output`` of a client-executed built-in tool (its JSON result as an object)."""
    output: Any = content_text(content)
    if call_type not in _TEXT_OUTPUT_CALLS:
        try:
            output = orjson.loads(output)
        except orjson.JSONDecodeError:
            pass
    return {"type": f"{call_type}_output", "call_id": call_id, "output": output}


def remember_response_turn(
    transcript: MutableMapping[str, Any], items: Sequence[Mapping[str, Any]]
) -> None:
    """Keep one model call's final output items so later requests send them back unchanged."""
    if not items:
        return
    text = "".join(
        str(part.get("text", ""))
        for item in items
        if item.get("type") == "message"
        for part in item_parts(item.get("content"))
        if isinstance(part, Mapping) and part.get("type") == "output_text"
    )
    call_ids = [str(item["call_id"]) for item in items if item.get("call_id")]
    turns = transcript.setdefault("responseTurns", [])
    turns.append({"text": text, "callIds": call_ids, "items": [dict(i) for i in items]})
    del turns[:-_TRANSCRIPT_TURNS]


def _kept_turns(
    transcript: Mapping[str, Any], entry: Mapping[str, Any], used: set[int]
) -> list[Mapping[str, Any]]:
    """The kept turns of an assistant entry, oldest first; each turn serves one entry."""
    call_ids = {str(call.get("id")) for call in entry.get("toolCalls") or ()}
    text = content_text(entry.get("content"))
    found: list[Mapping[str, Any]] = []
    for position, turn in enumerate(transcript.get("responseTurns") or ()):
        if position in used or not isinstance(turn, Mapping):
            continue
        ids = set(turn.get("callIds") or ())
        if (ids & call_ids) if call_ids else (not ids and turn.get("text") == text):
            used.add(position)
            found.append(turn)
            if not call_ids:
                break
    return found


def history_to_input(
    history: Sequence[Mapping[str, Any]], transcript: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Input items for the history; each function call is followed by its output."""
    outputs = {
        str(entry.get("toolCallId")): entry.get("content")
        for entry in history
        if entry.get("role") == "tool"
    }
    server = _server_tool_ids(history, transcript)
    call_types = {
        str(item["call_id"]): str(item.get("type") or "function_call")
        for turn in transcript.get("responseTurns") or ()
        if isinstance(turn, Mapping)
        for item in turn.get("items") or ()
        if isinstance(item, Mapping) and item.get("call_id")
    }
    sent: set[str] = set()
    used: set[int] = set()
    items: list[dict[str, Any]] = []

    def output_of(call_id: str) -> None:
        if call_id in outputs and call_id not in sent:
            call_type = call_types.get(call_id, "function_call")
            items.append(call_output_item(call_id, outputs[call_id], call_type))
            sent.add(call_id)

    for entry in history:
        role = entry.get("role")
        if role == "assistant":
            calls = [c for c in entry.get("toolCalls") or () if str(c.get("id")) not in server]
            if not calls and not content_text(entry.get("content")):
                continue  # only built-in tool calls: their items come with the kept turn
            entry = {**entry, "toolCalls": calls}
            covered: set[str] = set()
            turns = _kept_turns(transcript, entry, used)
            for turn in turns:
                items.extend(dict(item) for item in turn.get("items") or ())
                for call_id in turn.get("callIds") or ():
                    covered.add(str(call_id))
                    output_of(str(call_id))
            text = content_text(entry.get("content"))
            if not turns and text:
                items.append({"role": "assistant", "content": text})
            rest = [c for c in entry.get("toolCalls") or () if str(c.get("id")) not in covered]
            for call in rest:
                items.append(function_call_item(call))
                output_of(str(call.get("id")))
        elif role == "tool" and str(entry.get("toolCallId")) not in server:
            output_of(str(entry.get("toolCallId")))
        elif role in ("system", "developer"):
            items.append({"role": role, "content": content_text(entry.get("content"))})
        elif role == "user":
            parts = content_to_responses(entry.get("content"))
            if parts:
                items.append({"role": "user", "content": parts})
    return items


def _server_tool_ids(
    history: Sequence[Mapping[str, Any]], transcript: Mapping[str, Any]
) -> set[str]:
    """Ids of the built-in tools OpenAI ran: their items travel inside the kept turns (or,
    without one, cannot be rebuilt), never as function calls and outputs."""
    ids = {
        str(call.get("id"))
        for entry in history
        if entry.get("role") == "assistant"
        for call in entry.get("toolCalls") or ()
        if call.get("name") in SERVER_TOOLS
    }
    for turn in transcript.get("responseTurns") or ():
        for item in turn.get("items") or () if isinstance(turn, Mapping) else ():
            if isinstance(item, Mapping) and item.get("type") in SERVER_TOOLS:
                ids.add(str(item.get("id")))
    return ids


def tools_to_responses(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Function tools in the Responses shape: flat, not nested under ``function``."""
    converted = []
    for tool in tools:
        item: dict[str, Any] = {"type": "function", "name": tool["name"]}
        if tool.get("description"):
            item["description"] = tool["description"]
        item["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        converted.append(item)
    return converted


def build_responses_request(
    *,
    model: str | None,
    history: Sequence[Mapping[str, Any]],
    transcript: Mapping[str, Any],
    user_content: Any = None,
    tools: Sequence[Mapping[str, Any]] = (),
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """History, then this run's user turn; stateless (``store: false``) with encrypted
    reasoning included, whatever ``params`` say."""
    items = history_to_input(history, transcript)
    if user_content is not None:
        parts = content_to_responses(user_content)
        user = {"role": "user", "content": parts}
        if parts and (not items or items[-1] != user):
            items.append(user)
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    body["input"] = items
    if tools:
        body["tools"] = tools_to_responses(tools)
    body.update(params or {})
    body["stream"] = True
    body["store"] = False
    include = [i for i in body.get("include") or () if i != ENCRYPTED_REASONING]
    body["include"] = [*include, ENCRYPTED_REASONING]
    return body
