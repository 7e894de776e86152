"""AG-UI inbound compatibility boundary: legacy renames, ``*_CHUNK`` expansion, parsing.

Runs before the mapping, like the AG-UI TypeScript client: retired ``THINKING_*`` events are
renamed to ``REASONING_*`` (with generated ids where the legacy event had none), then
``TEXT_MESSAGE_CHUNK`` / ``TOOL_CALL_CHUNK`` / ``REASONING_MESSAGE_CHUNK`` are expanded into
START / CONTENT|ARGS / END, and each event is parsed with the ``ag-ui-protocol`` models.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import Event, EventType
from pydantic import TypeAdapter, ValidationError

from providers.errors import UpstreamProtocolError

__all__ = ["AguiNormalizer", "parse_agui_event"]

_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
_KNOWN_TYPES = frozenset(kind.value for kind in EventType)

_LEGACY = {
    "THINKING_START": "REASONING_START",
    "THINKING_END": "REASONING_END",
    "THINKING_CONTENT": "REASONING_MESSAGE_CONTENT",
    "THINKING_TEXT_MESSAGE_START": "REASONING_MESSAGE_START",
    "THINKING_TEXT_MESSAGE_CONTENT": "REASONING_MESSAGE_CONTENT",
    "THINKING_TEXT_MESSAGE_END": "REASONING_MESSAGE_END",
}


def parse_agui_event(raw: dict[str, Any]) -> Any:
    """Validate one wire event with the ``ag-ui-protocol`` models (``UpstreamProtocolError``)."""
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in _KNOWN_TYPES:  # a list/dict type is unhashable
        raise UpstreamProtocolError(
            f"AG-UI AGUI503: unknown event type {raw.get('type')!r}",
            details={"rule": "AGUI503"},
        )
    if raw.get("type") == "CUSTOM" and "value" not in raw:
        raw = {**raw, "value": None}  # the TypeScript schema (z.any()) accepts an absent value
    try:
        return _EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        what = errors[0]["msg"] if errors else ""
        raise UpstreamProtocolError(
            f"AG-UI {raw.get('type')!s} event does not match its schema"
            + (f" ({where}: {what})" if where else ""),
            details={"rule": "AGUI504", "eventType": raw.get("type")},
        ) from None


@dataclass
class AguiNormalizer:
    """Stateful per upstream response: yields the wire events the mapping should see."""

    _counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _reasoning_span: str | None = None
    _reasoning_message: str | None = None
    _text_chunk: str | None = None
    _tool_chunk: str | None = None
    _reasoning_chunk: str | None = None

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"

    # ---------------------------------------------------------------- legacy THINKING_*

    def _rename(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        kind = raw.get("type")
        replacement = _LEGACY.get(kind) if isinstance(kind, str) else None
        if replacement is None:
            return [raw]
        event = {k: v for k, v in raw.items() if k not in ("title",)}
        event["type"] = replacement
        out: list[dict[str, Any]] = []
        if replacement == "REASONING_START":
            self._reasoning_span = event.get("messageId") or self._id("thinking")
            event["messageId"] = self._reasoning_span
        elif replacement == "REASONING_END":
            event["messageId"] = (
                self._reasoning_span or event.get("messageId") or self._id("thinking")
            )
            self._reasoning_span = None
        elif replacement == "REASONING_MESSAGE_START":
            self._reasoning_message = event.get("messageId") or self._id("thinking_msg")
            event["messageId"] = self._reasoning_message
            event.setdefault("role", "reasoning")
        elif replacement == "REASONING_MESSAGE_CONTENT":
            if self._reasoning_message is None:
                self._reasoning_message = event.get("messageId") or self._id("thinking_msg")
                out.append(
                    {
                        "type": "REASONING_MESSAGE_START",
                        "messageId": self._reasoning_message,
                        "role": "reasoning",
                    }
                )
            event["messageId"] = self._reasoning_message
        elif replacement == "REASONING_MESSAGE_END":
            event["messageId"] = (
                self._reasoning_message or event.get("messageId") or self._id("thinking_msg")
            )
            self._reasoning_message = None
        if replacement == "REASONING_END" and self._reasoning_message is not None:
            out.append({"type": "REASONING_MESSAGE_END", "messageId": self._reasoning_message})
            self._reasoning_message = None
        out.append(event)
        return out

    # ---------------------------------------------------------------- *_CHUNK expansion

    def _close_chunks(self, keep: str | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._text_chunk is not None and keep != "text":
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self._text_chunk})
            self._text_chunk = None
        if self._tool_chunk is not None and keep != "tool":
            out.append({"type": "TOOL_CALL_END", "toolCallId": self._tool_chunk})
            self._tool_chunk = None
        if self._reasoning_chunk is not None and keep != "reasoning":
            out.append({"type": "REASONING_MESSAGE_END", "messageId": self._reasoning_chunk})
            self._reasoning_chunk = None
        return out

    def _expand_text(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close_chunks(keep="text")
        message_id = raw.get("messageId")
        if message_id is not None and message_id != self._text_chunk:
            out += self._close_chunks()
            start = {"type": "TEXT_MESSAGE_START", "messageId": message_id}
            start["role"] = raw.get("role") or "assistant"
            out.append(start)
            self._text_chunk = message_id
        if self._text_chunk is None:
            raise UpstreamProtocolError("TEXT_MESSAGE_CHUNK without a messageId opens no message")
        if raw.get("delta"):
            out.append(
                {
                    "type": "TEXT_MESSAGE_CONTENT",
                    "messageId": self._text_chunk,
                    "delta": raw["delta"],
                }
            )
        return out

    def _expand_tool(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close_chunks(keep="tool")
        call_id = raw.get("toolCallId")
        if call_id is not None and call_id != self._tool_chunk:
            out += self._close_chunks()
            if not raw.get("toolCallName"):
                raise UpstreamProtocolError("TOOL_CALL_CHUNK starting a tool call has no name")
            start = {"type": "TOOL_CALL_START", "toolCallId": call_id}
            start["toolCallName"] = raw["toolCallName"]
            if raw.get("parentMessageId"):
                start["parentMessageId"] = raw["parentMessageId"]
            out.append(start)
            self._tool_chunk = call_id
        if self._tool_chunk is None:
            raise UpstreamProtocolError("TOOL_CALL_CHUNK without a toolCallId opens no tool call")
        if raw.get("delta"):
            out.append(
                {"type": "TOOL_CALL_ARGS", "toolCallId": self._tool_chunk, "delta": raw["delta"]}
            )
        return out

    def _expand_reasoning(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close_chunks(keep="reasoning")
        message_id = raw.get("messageId")
        if message_id is not None and message_id != self._reasoning_chunk:
            out += self._close_chunks()
            out.append(
                {"type": "REASONING_MESSAGE_START", "messageId": message_id, "role": "reasoning"}
            )
            self._reasoning_chunk = message_id
        if self._reasoning_chunk is None:
            raise UpstreamProtocolError("REASONING_MESSAGE_CHUNK without a messageId opens nothing")
        if raw.get("delta"):
            out.append(
                {
                    "type": "REASONING_MESSAGE_CONTENT",
                    "messageId": self._reasoning_chunk,
                    "delta": raw["delta"],
                }
            )
        return out

    def _expand(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        kind = raw.get("type")
        if kind == "TEXT_MESSAGE_CHUNK":
            return self._expand_text(raw)
        if kind == "TOOL_CALL_CHUNK":
            return self._expand_tool(raw)
        if kind == "REASONING_MESSAGE_CHUNK":
            if (
                raw.get("messageId") is not None
                and raw.get("messageId") == self._open_reasoning_id()
            ):
                # a chunk continuing a message opened by REASONING_MESSAGE_START
                return (
                    [{"type": "REASONING_MESSAGE_CONTENT", **_without(raw, "type")}]
                    if raw.get("delta")
                    else []
                )
            return self._expand_reasoning(raw)
        if kind in ("RAW", "CUSTOM"):
            return [raw]
        return [*self._close_chunks(), raw]

    _explicit_reasoning: str | None = None

    def _open_reasoning_id(self) -> str | None:
        return self._explicit_reasoning

    def note_reasoning(self, kind: str, message_id: str | None) -> None:
        """Track REASONING_MESSAGE_START/END opened explicitly (a CHUNK may continue one)."""
        if kind == "REASONING_MESSAGE_START":
            self._explicit_reasoning = message_id
        elif kind == "REASONING_MESSAGE_END" and message_id == self._explicit_reasoning:
            self._explicit_reasoning = None

    def feed(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for renamed in self._rename(raw):
            for event in self._expand(renamed):
                kind = event.get("type")
                if isinstance(kind, str) and kind.startswith("REASONING_MESSAGE_"):
                    self.note_reasoning(kind, event.get("messageId"))
                out.append(event)
        return out

    def close(self) -> list[dict[str, Any]]:
        return self._close_chunks()


def _without(raw: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in keys}
