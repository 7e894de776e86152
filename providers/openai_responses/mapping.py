"""Map Responses API stream events onto the run context (protocol.md §10, "OpenAI Responses").

State is keyed on ``output_index`` (``item_id`` is only a hint: some compatible servers rotate
it on every event). Per output item:

- ``message`` → one assistant message (``output_text`` deltas; ``refusal`` deltas as content
  with ``meta.refusal``), opened at its first text, so an empty item opens nothing;
- ``reasoning`` → one reasoning entity (summary parts, separated by a blank line, and raw
  ``reasoning_text``); its ``encrypted_content`` stays in the item kept for the transcript;
- ``function_call`` → a tool handed to the app (``meta.executor = "app"``, ``call_id`` is the
  toolCallId); arguments from the deltas, ``tool.running`` at item done;
- a built-in tool OpenAI executes (``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``, ``image_generation_call``, ``mcp_call``, ``mcp_list_tools``) → a
  tool the runtime executes (``meta.executor = "server"``): running from the start, its inputs
  as arguments and its results as result at item done;
- any other ``*_call`` item is one the client executes (``custom_tool_call``,
  ``local_shell_call``, ``computer_call`` …) → handed to the app like a function call, its
  inputs as arguments (a custom tool's free-form ``input`` as is); its result goes back as the
  matching ``*_call_output`` item.

A ``.done`` event whose text is longer than the deltas received supplies the rest (servers that
send only ``.done``). The terminal events end the model call: ``response.completed`` and
``response.incomplete`` (the stop reason, usage), ``response.failed`` (raised as the run's
failure with the upstream's error code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from providers.context import RunContext
from providers.errors import UpstreamProtocolError
from providers.model_calls import parse_arguments
from providers.openai_responses.events import upstream_error

__all__ = [
    "EVENT_HANDLERS",
    "OutputItem",
    "ResponseCall",
    "apply_event",
    "finish_items",
    "item_parts",
]

TRUNCATED = "truncated_arguments"
#: item fields that hold a built-in tool's results rather than its inputs
_RESULT_FIELDS = frozenset({"results", "outputs", "output", "result", "error"})
_ITEM_FIELDS = frozenset({"id", "type", "status"})
#: built-in tools OpenAI executes itself; other ``*_call`` items are executed by the client
SERVER_TOOLS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
    }
)
_CLIENT_CALL_FIELDS = frozenset({"call_id", "name"})
_PART_SEPARATOR = "\n\n"


@dataclass(slots=True)
class OutputItem:
    index: int
    type: str
    #: the message / reasoning id or the toolCallId
    entity_id: str
    meta: dict[str, Any]
    opened: bool = False
    refusal: bool = False
    #: text received per part, keyed ("text" | "refusal" | "summary" | "content", index)
    parts: dict[tuple[str, int], str] = field(default_factory=dict)
    last_part: tuple[str, int] | None = None
    arguments: str = ""
    upstream_completed: bool = False
    done: bool = False


@dataclass(slots=True)
class ResponseCall:
    """The state of one model call (one ``POST /responses``) of a run."""

    number: int
    items: dict[int, OutputItem] = field(default_factory=dict)
    item_ids: dict[str, int] = field(default_factory=dict)
    #: the final output items (``output_item.done``), sent back in the next request's input
    raw_items: dict[int, dict[str, Any]] = field(default_factory=dict)
    model: str | None = None
    #: The response's ``id`` (its span's ``gen_ai.response.id``).
    response_id: str | None = None
    status: str | None = None
    incomplete_reason: str | None = None
    usage: Mapping[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self.status is not None

    def meta(self, upstream_id: Any = None) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.model:
            meta["model"] = self.model
        if isinstance(upstream_id, str) and upstream_id:
            meta["upstreamId"] = upstream_id
        return meta


Handler = Callable[[ResponseCall, RunContext, Mapping[str, Any]], None]


# ---------------------------------------------------------------- field access


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def item_parts(value: Any) -> list[Any]:
    """An upstream item's list field (``content``, ``summary``, a part's ``annotations``):
    anything but a list is empty."""
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _item_of(call: ResponseCall, event: Mapping[str, Any]) -> OutputItem:
    index = _int(event.get("output_index"))
    if index is None:
        index = call.item_ids.get(_str(event.get("item_id")))
    item = call.items.get(index) if index is not None else None
    if item is None:
        raise UpstreamProtocolError(
            f'The upstream sent "{event.get("type")}" for an output item it never added.'
        )
    return item


# ---------------------------------------------------------------- response lifecycle


def _remember(call: ResponseCall, response: Mapping[str, Any]) -> None:
    call.model = call.model or _str(response.get("model")) or None
    call.response_id = call.response_id or _str(response.get("id")) or None


def _on_response(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    _remember(call, _mapping(event.get("response")))


def _end(call: ResponseCall, event: Mapping[str, Any], default_status: str) -> Mapping[str, Any]:
    response = _mapping(event.get("response"))
    _remember(call, response)
    call.status = _str(response.get("status")) or default_status
    usage = response.get("usage")
    if isinstance(usage, Mapping):
        call.usage = usage
    return response


def _on_completed(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    _end(call, event, "completed")
    finish_items(call, ctx)


def _on_incomplete(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    response = _end(call, event, "incomplete")
    reason = _str(_mapping(response.get("incomplete_details")).get("reason"))
    call.incomplete_reason = reason or "incomplete"
    finish_items(call, ctx, truncated=True)


def _on_failed(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    response = _end(call, event, "failed")
    raise upstream_error(response.get("error"), "The upstream response failed.")


# ---------------------------------------------------------------- output items


def _new_id(call: ResponseCall, ctx: RunContext, prefix: str, index: int, wanted: str) -> str:
    ident = wanted or f"{prefix}_{call.number}_{index}"
    if ctx.tool(ident) is not None:
        raise UpstreamProtocolError(f'The upstream reused the tool call id "{ident}".')
    return ident


def _on_item_added(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    index = _int(event.get("output_index"))
    raw = event.get("item")
    if index is None or not isinstance(raw, Mapping) or not _str(raw.get("type")):
        raise UpstreamProtocolError("An output_item.added event lacks its index or item.")
    if index in call.items:
        raise UpstreamProtocolError(f"The upstream added output item {index} twice.")
    kind = raw["type"]
    upstream_id = _str(raw.get("id"))
    meta = call.meta(upstream_id)
    if kind == "message":
        item = OutputItem(index, kind, f"msg_{call.number}_{index}", meta)
        if _str(raw.get("phase")):
            item.meta["phase"] = raw["phase"]
    elif kind == "reasoning":
        item = OutputItem(index, kind, f"rsn_{call.number}_{index}", meta)
    elif kind == "function_call":
        name = _str(raw.get("name"))
        if not name:
            raise UpstreamProtocolError("A function_call item has no name.")
        ident = _new_id(call, ctx, "call", index, _str(raw.get("call_id")) or upstream_id)
        item = OutputItem(index, kind, ident, meta)
        ctx.request_tool(ident, name, index=index, executor="app", meta=meta or None)
        _tool_arguments(item, ctx, _str(raw.get("arguments")))
    elif kind in SERVER_TOOLS:
        ident = _new_id(call, ctx, kind, index, upstream_id)
        item = OutputItem(index, kind, ident, {**meta, "executor": "server"})
        ctx.request_tool(ident, kind, index=index, meta=item.meta)
        ctx.tool_running(ident)
    elif kind.endswith("_call"):
        ident = _new_id(call, ctx, "call", index, _str(raw.get("call_id")) or upstream_id)
        item = OutputItem(index, kind, ident, {**meta, "callType": kind})
        name = _str(raw.get("name")) or kind
        ctx.request_tool(ident, name, index=index, executor="app", meta=item.meta)
    else:  # an item the gateway has no entity for: kept for the transcript only
        item = OutputItem(index, kind, upstream_id, meta)
    call.items[index] = item
    if upstream_id:
        call.item_ids[upstream_id] = index


def _open_message(item: OutputItem, ctx: RunContext) -> None:
    if not item.opened:
        meta = dict(item.meta)
        if item.refusal:
            meta["refusal"] = True
        ctx.open_message(item.entity_id, "assistant", meta=meta or None)
        item.opened = True


_PART_KINDS = {"message": ("text", "refusal"), "reasoning": ("summary", "content")}


def _text(item: OutputItem, ctx: RunContext, part: tuple[str, int], delta: str) -> None:
    """Append ``delta`` to a text part of a message or reasoning item."""
    if part[0] not in _PART_KINDS.get(item.type, ()):
        raise UpstreamProtocolError(f'The upstream sent {part[0]} text for a "{item.type}" item.')
    if not delta:
        return
    if item.type == "message":
        if part[0] == "refusal":
            item.refusal = True
        _open_message(item, ctx)
        ctx.message_delta(item.entity_id, delta)
    else:
        if not item.opened:
            ctx.open_reasoning(item.entity_id, meta=item.meta or None)
            item.opened = True
        elif item.last_part not in (None, part) and part not in item.parts:
            ctx.reasoning_delta(item.entity_id, _PART_SEPARATOR)
        ctx.reasoning_delta(item.entity_id, delta)
    item.parts[part] = item.parts.get(part, "") + delta
    item.last_part = part


def _rest(item: OutputItem, ctx: RunContext, part: tuple[str, int], full: str) -> None:
    """A ``.done`` text: emit what the deltas did not carry yet."""
    seen = item.parts.get(part, "")
    if full.startswith(seen) and len(full) > len(seen):
        _text(item, ctx, part, full[len(seen) :])


def _part_handler(kind: str, field_name: str, index_field: str, *, done: bool) -> Handler:
    def handle(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
        item = _item_of(call, event)
        if item.done:
            raise UpstreamProtocolError("The upstream sent text for an item it had finished.")
        part = (kind, _int(event.get(index_field)) or 0)
        if done:
            _rest(item, ctx, part, _str(event.get(field_name)))
        else:
            _text(item, ctx, part, _str(event.get(field_name)))

    return handle


def _on_content_part_added(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _item_of(call, event)
    if item.type == "message" and _mapping(event.get("part")).get("type") == "refusal":
        item.refusal = True


def _tool_arguments(item: OutputItem, ctx: RunContext, delta: str) -> None:
    if delta:
        ctx.tool_arguments(item.entity_id, delta)
        item.arguments += delta


def _on_arguments_delta(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _function_call(call, event)
    _tool_arguments(item, ctx, _str(event.get("delta")))


def _on_arguments_done(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _function_call(call, event)
    full = _str(event.get("arguments"))
    if full.startswith(item.arguments):
        _tool_arguments(item, ctx, full[len(item.arguments) :])


def _function_call(call: ResponseCall, event: Mapping[str, Any]) -> OutputItem:
    item = _item_of(call, event)
    if item.type not in ("function_call", "custom_tool_call") or item.done:
        raise UpstreamProtocolError("Tool call arguments arrived for no open tool call.")
    return item


def _on_custom_input_done(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _function_call(call, event)
    full = _str(event.get("input"))
    if full.startswith(item.arguments):
        _tool_arguments(item, ctx, full[len(item.arguments) :])


def _on_builtin_completed(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _item_of(call, event)
    item.upstream_completed = True


# ---------------------------------------------------------------- item done


def _finish_message(item: OutputItem, ctx: RunContext, raw: Mapping[str, Any]) -> None:
    """Text the deltas missed, then ``message.completed`` (citations of the final item's text
    parts in ``meta.annotations``)."""
    annotations: list[Any] = []
    for position, part in enumerate(item_parts(raw.get("content"))):
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "output_text":
            _rest(item, ctx, ("text", position), _str(part.get("text")))
            annotations.extend(item_parts(part.get("annotations")))
        elif part.get("type") == "refusal":
            _rest(item, ctx, ("refusal", position), _str(part.get("refusal")))
    if item.opened:
        meta: dict[str, Any] = {"refusal": True} if item.refusal else {}
        if annotations:
            meta["annotations"] = annotations
        ctx.complete_message(item.entity_id, meta=meta or None)


def _finish_reasoning(item: OutputItem, ctx: RunContext, raw: Mapping[str, Any]) -> None:
    for group, kind in (("summary", "summary"), ("content", "content")):
        for position, part in enumerate(item_parts(raw.get(group))):
            if isinstance(part, Mapping):
                _rest(item, ctx, (kind, position), _str(part.get("text")))
    if item.opened:
        ctx.complete_reasoning(item.entity_id)


def _hand_to_app(item: OutputItem, ctx: RunContext, *, truncated: bool) -> None:
    """A call whose arguments are complete goes to the app; else it fails."""
    if not ctx.is_open("tool", item.entity_id):
        return
    ok = True if item.type == "custom_tool_call" else parse_arguments(item.arguments)[0]
    if not ok or truncated:
        code = TRUNCATED if truncated else "invalid_arguments"
        message = "The tool call's arguments are not complete JSON."
        ctx.fail_tool(item.entity_id, {"code": code, "message": message})
        return
    if not item.arguments.strip():
        _tool_arguments(item, ctx, "{}")
    ctx.tool_running(item.entity_id)


def _finish_builtin(item: OutputItem, ctx: RunContext, raw: Mapping[str, Any]) -> None:
    inputs = {k: v for k, v in raw.items() if k not in _ITEM_FIELDS | _RESULT_FIELDS}
    if inputs and not item.arguments:
        _tool_arguments(item, ctx, orjson.dumps(inputs).decode())
    status = _str(raw.get("status"))
    if status in ("failed", "incomplete"):
        error = {"code": "upstream_error", "message": f"The {item.type} {status}."}
        ctx.fail_tool(item.entity_id, {**error, "details": {"status": status}})
        return
    result = {k: v for k, v in raw.items() if k in _RESULT_FIELDS}
    ctx.complete_tool(item.entity_id, result or {"status": status or "completed"})


def _client_call_arguments(item: OutputItem, ctx: RunContext, raw: Mapping[str, Any]) -> None:
    if item.type == "custom_tool_call":
        full = _str(raw.get("input"))
        if full.startswith(item.arguments):
            _tool_arguments(item, ctx, full[len(item.arguments) :])
        return
    skipped = _ITEM_FIELDS | _RESULT_FIELDS | _CLIENT_CALL_FIELDS
    inputs = {k: v for k, v in raw.items() if k not in skipped}
    if inputs and not item.arguments:
        _tool_arguments(item, ctx, orjson.dumps(inputs).decode())


def _on_item_done(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    item = _item_of(call, event)
    raw = event.get("item")
    if item.done or not isinstance(raw, Mapping):
        raise UpstreamProtocolError("An output_item.done event repeats its item or lacks it.")
    item.done = True
    call.raw_items[item.index] = dict(raw)
    if item.type == "message":
        _finish_message(item, ctx, raw)
    elif item.type == "reasoning":
        _finish_reasoning(item, ctx, raw)
    elif item.type == "function_call":
        full = _str(raw.get("arguments"))
        if full.startswith(item.arguments):
            _tool_arguments(item, ctx, full[len(item.arguments) :])
        _hand_to_app(item, ctx, truncated=_str(raw.get("status")) == "incomplete")
    elif item.type in SERVER_TOOLS:
        if ctx.is_open("tool", item.entity_id):
            _finish_builtin(item, ctx, raw)
    elif item.type.endswith("_call"):
        _client_call_arguments(item, ctx, raw)
        _hand_to_app(item, ctx, truncated=_str(raw.get("status")) == "incomplete")


def finish_items(call: ResponseCall, ctx: RunContext, *, truncated: bool = False) -> None:
    """The response ended: close the items it left open (a truncated response fails its
    unfinished function calls ``truncated_arguments``)."""
    for item in call.items.values():
        if item.done:
            continue
        item.done = True
        if item.type == "message" and item.opened:
            ctx.complete_message(item.entity_id, meta={"refusal": True} if item.refusal else None)
        elif item.type == "reasoning" and item.opened:
            ctx.complete_reasoning(item.entity_id)
        elif item.type == "function_call" or (
            item.type.endswith("_call") and item.type not in SERVER_TOOLS
        ):
            _hand_to_app(item, ctx, truncated=truncated)
        elif item.upstream_completed and ctx.is_open("tool", item.entity_id):
            ctx.complete_tool(item.entity_id, {"status": "completed"})


# ---------------------------------------------------------------- dispatch


def _ignore(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    return None


EVENT_HANDLERS: dict[str, Handler] = {
    "response.created": _on_response,
    "response.in_progress": _on_response,
    "response.queued": _on_response,
    "response.completed": _on_completed,
    "response.incomplete": _on_incomplete,
    "response.failed": _on_failed,
    "response.output_item.added": _on_item_added,
    "response.output_item.done": _on_item_done,
    "response.content_part.added": _on_content_part_added,
    "response.content_part.done": _ignore,
    "response.output_text.delta": _part_handler("text", "delta", "content_index", done=False),
    "response.output_text.done": _part_handler("text", "text", "content_index", done=True),
    "response.refusal.delta": _part_handler("refusal", "delta", "content_index", done=False),
    "response.refusal.done": _part_handler("refusal", "refusal", "content_index", done=True),
    "response.reasoning_summary_part.added": _ignore,
    "response.reasoning_summary_part.done": _ignore,
    "response.reasoning_summary_text.delta": _part_handler(
        "summary", "delta", "summary_index", done=False
    ),
    "response.reasoning_summary_text.done": _part_handler(
        "summary", "text", "summary_index", done=True
    ),
    "response.reasoning_text.delta": _part_handler("content", "delta", "content_index", done=False),
    "response.reasoning_text.done": _part_handler("content", "text", "content_index", done=True),
    "response.function_call_arguments.delta": _on_arguments_delta,
    "response.function_call_arguments.done": _on_arguments_done,
    "response.custom_tool_call_input.delta": _on_arguments_delta,
    "response.custom_tool_call_input.done": _on_custom_input_done,
}


def apply_event(call: ResponseCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    """Apply one decoded event. Events after the response's terminal are a protocol error;
    unknown event types (audio, annotations, built-in tool progress) are ignored."""
    kind = _str(event.get("type"))
    if call.ended:
        raise UpstreamProtocolError(f'The upstream sent "{kind}" after the response ended.')
    handler = EVENT_HANDLERS.get(kind)
    if handler is not None:
        handler(call, ctx, event)
    elif kind.startswith("response.") and kind.endswith("_call.completed"):
        _on_builtin_completed(call, ctx, event)
