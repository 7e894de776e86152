"""Decode one Chat Completions SSE chunk into plain, normalised pieces (no events yet).

Handles the compatible servers' variants: ``reasoning_content`` / ``reasoning`` (one of them,
never both: vLLM may send the same text twice), Mistral's array ``content`` with ``thinking``
parts, ``refusal``, tool-call deltas, a missing ``finish_reason`` key, ``choices: []`` chunks
(usage, or Azure's prompt-filter chunk) and ``data: {"error": …}`` mid-stream.

Everything here reads ``orjson.loads`` output, whose objects are plain dicts: object checks are
``type(v) is dict`` (an ABC ``isinstance`` per field was a fifth of the decode time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from providers.errors import UpstreamError, UpstreamMalformedChunk
from providers.openai_chat.usage import find_openai_usage

__all__ = [
    "ChatChunk",
    "ChoiceDelta",
    "Segment",
    "ToolCallDelta",
    "decode_chunk",
    "decode_payload",
    "load_payload",
    "streamed_text",
]

SegmentKind = Literal["reasoning", "content", "refusal"]


@dataclass(frozen=True, slots=True)
class Segment:
    kind: SegmentKind
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True)
class ChoiceDelta:
    index: int
    segments: list[Segment] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    finish_reason: str | None = None
    #: OpenRouter ``reasoning_details`` items (signed / encrypted reasoning), kept for replay
    reasoning_details: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class ChatChunk:
    done: bool = False
    id: str | None = None
    model: str | None = None
    choices: list[ChoiceDelta] = field(default_factory=list)
    usage: Mapping[str, Any] | None = None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _content_segments(content: Any) -> list[Segment]:
    if isinstance(content, str):
        return [Segment("content", content)] if content else []
    segments: list[Segment] = []
    if isinstance(content, list):  # Mistral: [{"type":"thinking","thinking":[…]}, {"type":"text"}]
        for part in content:
            if type(part) is not dict:
                continue
            if part.get("type") == "thinking":
                inner = part.get("thinking")
                pieces = inner if isinstance(inner, list) else [{"text": inner}]
                text = "".join(_text(p.get("text")) for p in pieces if type(p) is dict)
                if text:
                    segments.append(Segment("reasoning", text))
            elif part.get("type") == "text" and _text(part.get("text")):
                segments.append(Segment("content", part["text"]))
    return segments


def _tool_call(raw: dict[str, Any], position: int) -> ToolCallDelta:
    function = raw.get("function")
    if type(function) is not dict:
        function = {}
    index = raw.get("index")
    return ToolCallDelta(
        index=index if type(index) is int else position,
        id=_text(raw.get("id")) or None,  # a non-string id or name is no id or name
        name=_text(function.get("name")) or None,
        arguments=_text(function.get("arguments")),
    )


def _choice(raw: dict[str, Any], position: int) -> ChoiceDelta:
    index = raw.get("index")
    choice = ChoiceDelta(index if type(index) is int else position)
    delta = raw.get("delta")
    if type(delta) is not dict:
        delta = {}
    if "content" in delta and (len(delta) == 1 or (len(delta) == 2 and "role" in delta)):
        # The streamed-text chunk: only ``content`` (and maybe ``role``).
        content = delta.get("content")
        if type(content) is str:
            if content:
                choice.segments.append(Segment("content", content))
        else:
            choice.segments.extend(_content_segments(content))
    else:
        reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
        if reasoning:
            choice.segments.append(Segment("reasoning", reasoning))
        choice.segments.extend(_content_segments(delta.get("content")))
        if _text(delta.get("refusal")):
            choice.segments.append(Segment("refusal", delta["refusal"]))
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            choice.reasoning_details = details
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            choice.tool_calls = [
                _tool_call(call, position)
                for position, call in enumerate(calls)
                if type(call) is dict
            ]
    finish = raw.get("finish_reason")
    choice.finish_reason = finish if isinstance(finish, str) and finish else None
    return choice


def _raise_error(error: Any) -> None:
    if type(error) is dict:
        message = _text(error.get("message")) or "The upstream reported an error."
        details = {k: error[k] for k in ("type", "code", "param") if error.get(k) is not None}
        raise UpstreamError(message, details=details or None)
    raise UpstreamError(_text(error) or "The upstream reported an error.")


def load_payload(data: str) -> dict[str, Any]:
    """``orjson.loads`` of a chunk that must be a JSON object (else ``UpstreamMalformedChunk``)."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamMalformedChunk("The upstream sent a chunk that is not JSON.") from None
    if type(payload) is not dict:
        raise UpstreamMalformedChunk("The upstream sent a chunk that is not a JSON object.")
    return payload


def decode_payload(payload: dict[str, Any]) -> ChatChunk:
    """Decode one loaded chunk object (an ``error`` object raises ``UpstreamError``)."""
    if payload.get("error"):
        _raise_error(payload["error"])
    raw_choices = payload.get("choices")
    choices = raw_choices if type(raw_choices) is list else []
    return ChatChunk(
        id=payload.get("id") or None,
        model=payload.get("model") or None,
        choices=[_choice(c, i) for i, c in enumerate(choices) if type(c) is dict],
        usage=find_openai_usage(payload),
    )


def decode_chunk(data: str) -> ChatChunk:
    """Decode one SSE ``data`` payload; ``[DONE]`` gives ``ChatChunk(done=True)``."""
    if data[:1] != "{" and data.strip() == "[DONE]":
        return ChatChunk(done=True)
    return decode_payload(load_payload(data))


def streamed_text(payload: dict[str, Any]) -> tuple[int, str] | None:
    """``(choice index, text)`` when ``payload`` is the streamed-text chunk, else None.

    The streamed-text chunk is what ``decode_payload`` reads as one choice with at most one
    ``content`` segment and nothing else: no error, no usage, one choice object whose ``delta``
    is ``{"content": str}`` (maybe with ``role``) and whose ``finish_reason`` is null or absent.
    Anything else (None) takes the general path; the tests hold the two paths to the same events.
    """
    choices = payload.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    size = len(delta)
    if not (size == 1 or (size == 2 and "role" in delta)):
        return None
    content = delta.get("content")
    if type(content) is not str:
        return None
    if payload.get("error") or payload.get("usage") is not None:
        return None
    if payload.get("x_groq") is not None:
        return None
    index = choice.get("index")
    return (index if type(index) is int else 0), content
