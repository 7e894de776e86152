"""Recorded upstream streams: decode SSE text and JSONL payload files into upstream chunks.

The chunks are ``httpx_sse.ServerSentEvent`` objects, the same type the SSE transport yields,
so a recording replays through a provider exactly like a live stream. Loaders follow the
replay rules of the fixtures README: a ``*.chunks.txt`` file holds one SSE ``data`` payload per
line (no ``data:`` prefix, no ``event:`` line, no ``[DONE]``); other files are raw
``text/event-stream`` bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

__all__ = [
    "iter_sse_text",
    "load_jsonl_objects",
    "load_recorded_stream",
    "parse_sse_text",
    "payload_lines_to_sse",
    "split_turns",
]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def iter_sse_text(text: str) -> Iterator[ServerSentEvent]:
    """Decode a ``text/event-stream`` body per the SSE spec (comments, unknown fields dropped)."""
    event = ""
    data: list[str] = []
    event_id = ""
    retry: int | None = None
    for line in _LINE_BREAK.split(text):
        if line == "":
            if data:
                yield ServerSentEvent(event or None, "\n".join(data), event_id or None, retry)
            event, data, retry = "", [], None
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
    if data:
        yield ServerSentEvent(event or None, "\n".join(data), event_id or None, retry)


def parse_sse_text(text: str) -> list[ServerSentEvent]:
    return list(iter_sse_text(text))


def payload_lines_to_sse(
    text: str, *, event_from_type: bool = False, done: bool = False
) -> list[ServerSentEvent]:
    """One SSE event per non-empty line (the vercel/ai ``*.chunks.txt`` harness)."""
    events: list[ServerSentEvent] = []
    for line in _LINE_BREAK.split(text):
        if not line.strip():
            continue
        name: str | None = None
        if event_from_type:
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("type"), str):
                name = parsed["type"]
        events.append(ServerSentEvent(name, line))
    if done:
        events.append(ServerSentEvent(None, "[DONE]"))
    return events


def load_recorded_stream(path: str | Path, dialect: str) -> list[ServerSentEvent]:
    """Load a recording of ``dialect``: ``openai-chat``, ``openai-responses``,
    ``anthropic-messages`` or ``ag-ui`` (``event:`` names restored from ``type`` where the live
    stream has them)."""
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    if file.name.endswith(".chunks.txt") or file.suffix == ".jsonl":
        return payload_lines_to_sse(
            text,
            event_from_type=dialect in ("anthropic-messages", "openai-responses"),
            done=dialect == "openai-chat",
        )
    return parse_sse_text(text)


def load_jsonl_objects(text: str) -> list[Any]:
    """Parse one JSON value per non-empty line (raises ``ValueError`` on a malformed line)."""
    return [orjson.loads(line) for line in _LINE_BREAK.split(text) if line.strip()]


def split_turns(
    chunks: Iterable[ServerSentEvent], is_boundary: Callable[[ServerSentEvent], bool]
) -> list[list[ServerSentEvent]]:
    """Split a recording of concatenated responses at each boundary chunk (which starts a turn)."""
    turns: list[list[ServerSentEvent]] = []
    for chunk in chunks:
        if not turns or (is_boundary(chunk) and turns[-1]):
            turns.append([])
        turns[-1].append(chunk)
    return turns
