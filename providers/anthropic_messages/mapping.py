"""Map Anthropic Messages stream events onto the run context (protocol.md §10).

Blocks are keyed by ``index``. One model call gives one assistant message (its text blocks
append to it), one reasoning entity per ``thinking`` block (``signature_delta`` kept and put in
``meta.signature`` of ``reasoning.completed``) or ``redacted_thinking`` block
(``redacted: true``), and a tool per ``tool_use`` (executed by the app, §9; ``{}`` when no
input was streamed) or ``server_tool_use`` (runtime-executed: running until its
``*_tool_result`` block arrives, possibly in the next response). ``message_delta`` usage
supersedes ``message_start``; ``ping`` and unknown events are ignored; ``error`` fails the run.
A second ``message_start`` closes what the first one left open (a spliced stream).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from providers.anthropic_messages.usage import merge_anthropic_usage
from providers.context import RunContext
from providers.errors import UpstreamError, UpstreamProtocolError
from providers.model_calls import parse_arguments

__all__ = ["EVENT_HANDLERS", "AnthropicCall", "close_blocks", "handle_event"]

TRUNCATED = {
    "code": "truncated_arguments",
    "message": "The model stopped before the tool input was complete.",
}
_RETRYABLE = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


@dataclass(slots=True)
class Block:
    kind: str  # text | thinking | redacted | tool | server_tool | result | other
    raw: dict[str, Any]
    entity_id: str | None = None
    json: str = ""
    open: bool = True
    prefilled: bool = False


@dataclass(slots=True)
class AnthropicCall:
    """One model call (one upstream response, or one message of a concatenated recording)."""

    number: int
    message_id: str | None = None
    message_open: bool = False
    started: bool = False
    stopped: bool = False
    messages_started: int = 0
    blocks: dict[int, Block] = field(default_factory=dict)
    raw_blocks: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None
    stop_details: Any = None
    upstream_id: str | None = None
    model: str | None = None
    server_tools: set[str] = field(default_factory=set)

    def meta(self) -> dict[str, Any] | None:
        meta: dict[str, Any] = {}
        if self.model:
            meta["model"] = self.model
        if self.upstream_id:
            meta["upstreamId"] = self.upstream_id
        return meta or None


Handler = Callable[[AnthropicCall, RunContext, Mapping[str, Any]], None]


def _index(event: Mapping[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else -1


def _ensure_message(call: AnthropicCall, ctx: RunContext) -> str:
    if call.message_id is None:
        call.message_id = f"msg_{call.number}" + (
            f"_{call.messages_started}" if call.messages_started > 1 else ""
        )
    if not call.message_open:
        ctx.open_message(call.message_id, "assistant", meta=call.meta())
        call.message_open = True
    return call.message_id


def _close_block(call: AnthropicCall, ctx: RunContext, block: Block, *, truncated: bool) -> None:
    if not block.open:
        return
    block.open = False
    ident = block.entity_id
    if block.kind == "thinking" and ident is not None:
        signature = block.raw.get("signature")
        ctx.complete_reasoning(ident, meta={"signature": signature} if signature else None)
    elif block.kind == "redacted" and ident is not None:
        ctx.complete_reasoning(ident)
    elif block.kind in ("tool", "server_tool") and ident is not None:
        if not ctx.is_open("tool", ident):  # its result block ended it (no block stop came)
            call.raw_blocks.append(block.raw)
            return
        ok, value = parse_arguments(block.json)
        if not ok:
            ctx.fail_tool(ident, TRUNCATED)
        else:
            if not block.json.strip():
                ctx.tool_arguments(ident, "{}")
            block.raw["input"] = value
            ctx.tool_running(ident)
    call.raw_blocks.append(block.raw)


def close_blocks(call: AnthropicCall, ctx: RunContext, *, truncated: bool = False) -> None:
    """Close every open block (in index order), then the assistant message."""
    for index in sorted(call.blocks):
        _close_block(call, ctx, call.blocks[index], truncated=truncated)
    call.blocks.clear()
    if call.message_open and call.message_id is not None:
        ctx.complete_message(call.message_id)
        call.message_open = False


# -- message events -----------------------------------------------------------------------------


def on_message_start(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    message = event.get("message") if isinstance(event.get("message"), Mapping) else {}
    assert isinstance(message, Mapping)
    if call.started and (call.blocks or call.message_open):
        close_blocks(call, ctx, truncated=True)  # a message spliced into an unfinished one
        call.message_id = None
    call.started = True
    call.messages_started += 1
    call.raw_blocks = []  # only the last message of a spliced stream is the assistant turn
    call.upstream_id = message.get("id") or call.upstream_id
    call.model = message.get("model") or call.model
    usage = message.get("usage")
    if isinstance(usage, Mapping):
        call.usage = merge_anthropic_usage(None, usage)


def on_message_delta(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    delta = event.get("delta") if isinstance(event.get("delta"), Mapping) else {}
    assert isinstance(delta, Mapping)
    if isinstance(delta.get("stop_reason"), str):
        call.stop_reason = delta["stop_reason"]
    if delta.get("stop_details") is not None:
        call.stop_details = delta["stop_details"]
    usage = event.get("usage")
    if isinstance(usage, Mapping):
        call.usage = merge_anthropic_usage(call.usage, usage)
    # max_tokens can land inside a tool_use block that never gets its content_block_stop
    close_blocks(call, ctx, truncated=call.stop_reason == "max_tokens")


def on_message_stop(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    close_blocks(call, ctx, truncated=call.stop_reason == "max_tokens")
    call.stopped = True


def on_error(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    error = event.get("error") if isinstance(event.get("error"), Mapping) else {}
    assert isinstance(error, Mapping)
    kind = error.get("type")
    message = error.get("message")
    raise UpstreamError(
        message if isinstance(message, str) and message else "The upstream reported an error.",
        details={"type": kind} if isinstance(kind, str) else None,
        retryable=kind in _RETRYABLE,
    )


def on_ignored(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    return None


# -- content blocks -----------------------------------------------------------------------------


def _start_text(call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]) -> Block:
    block = Block("text", raw)
    message_id = _ensure_message(call, ctx)
    if _str(raw.get("text")):
        ctx.message_delta(message_id, raw["text"])
    return block


def _start_thinking(call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]) -> Block:
    ident = f"rsn_{call.number}_{call.messages_started}_{index}"
    ctx.open_reasoning(ident, meta=call.meta())
    if _str(raw.get("thinking")):
        ctx.reasoning_delta(ident, raw["thinking"])
    return Block("thinking", raw, ident)


def _start_redacted(call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]) -> Block:
    ident = f"rsn_{call.number}_{call.messages_started}_{index}"
    ctx.open_reasoning(ident, redacted=True, meta=call.meta())
    return Block("redacted", raw, ident)


def _prefilled(block: Block, ctx: RunContext) -> Block:
    """Some compatible servers send the whole input in the start block and no deltas."""
    initial = block.raw.get("input")
    if isinstance(initial, dict) and initial and block.entity_id is not None:
        block.json = orjson.dumps(initial).decode()
        block.prefilled = True
        ctx.tool_arguments(block.entity_id, block.json)
    return block


def _start_tool(call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]) -> Block:
    ident = str(raw.get("id") or f"toolu_{call.number}_{index}")
    ctx.request_tool(ident, str(raw.get("name") or "tool"), executor="app", meta=call.meta())
    return _prefilled(Block("tool", raw, ident), ctx)


def _start_server_tool(
    call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]
) -> Block:
    ident = str(raw.get("id") or f"srvtoolu_{call.number}_{index}")
    meta = {**(call.meta() or {}), "executor": "server"}
    ctx.request_tool(ident, str(raw.get("name") or "server_tool"), meta=meta)
    call.server_tools.add(ident)
    return _prefilled(Block("server_tool", raw, ident), ctx)


def _start_other(call: AnthropicCall, ctx: RunContext, index: int, raw: dict[str, Any]) -> Block:
    tool_use_id = raw.get("tool_use_id")
    kind = raw.get("type")
    if isinstance(tool_use_id, str) and isinstance(kind, str) and kind.endswith("_tool_result"):
        record = ctx.tool(tool_use_id)
        if record is not None and ctx.is_open("tool", tool_use_id):
            ctx.complete_tool(tool_use_id, raw.get("content"), meta={"resultType": kind})
        return Block("result", raw)
    return Block("other", raw)


BLOCK_STARTERS: dict[str, Callable[[AnthropicCall, RunContext, int, dict[str, Any]], Block]] = {
    "text": _start_text,
    "thinking": _start_thinking,
    "redacted_thinking": _start_redacted,
    "tool_use": _start_tool,
    "server_tool_use": _start_server_tool,
}


def _check_block_start(call: AnthropicCall, ctx: RunContext, raw: Mapping[str, Any]) -> None:
    """A block the stream cannot have: it would re-open an entity that already ended."""
    kind = raw.get("type")
    ident = raw.get("id")
    if kind in ("tool_use", "server_tool_use") and isinstance(ident, str) and ctx.tool(ident):
        raise UpstreamProtocolError(f"Anthropic: tool_use id {ident!r} appeared twice.")
    if kind == "text" and call.message_id is not None and not call.message_open:
        raise UpstreamProtocolError("Anthropic: a content block after the message ended.")


def on_block_start(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    index = _index(event)
    raw = dict(event["content_block"]) if isinstance(event.get("content_block"), Mapping) else {}
    _check_block_start(call, ctx, raw)
    previous = call.blocks.pop(index, None)
    if previous is not None:
        _close_block(call, ctx, previous, truncated=False)
    starter = BLOCK_STARTERS.get(str(raw.get("type")), _start_other)
    call.blocks[index] = starter(call, ctx, index, raw)


def _str(value: Any) -> str:
    """A start block's text-like field, or "" when the upstream sent null or another type."""
    return value if isinstance(value, str) else ""


def _text_delta(
    call: AnthropicCall, ctx: RunContext, block: Block, delta: Mapping[str, Any]
) -> None:
    text = delta.get("text")
    if isinstance(text, str) and text:
        block.raw["text"] = _str(block.raw.get("text")) + text
        ctx.message_delta(_ensure_message(call, ctx), text)


def _thinking_delta(
    call: AnthropicCall, ctx: RunContext, block: Block, delta: Mapping[str, Any]
) -> None:
    text = delta.get("thinking")
    if isinstance(text, str) and text and block.entity_id is not None:
        block.raw["thinking"] = _str(block.raw.get("thinking")) + text
        ctx.reasoning_delta(block.entity_id, text)


def _signature_delta(
    call: AnthropicCall, ctx: RunContext, block: Block, delta: Mapping[str, Any]
) -> None:
    signature = delta.get("signature")
    if isinstance(signature, str):
        block.raw["signature"] = _str(block.raw.get("signature")) + signature


def _json_delta(
    call: AnthropicCall, ctx: RunContext, block: Block, delta: Mapping[str, Any]
) -> None:
    piece = delta.get("partial_json")
    if block.prefilled:
        return  # the input came complete in the start block
    if isinstance(piece, str) and piece and block.entity_id is not None:
        block.json += piece
        ctx.tool_arguments(block.entity_id, piece)


def _citation_delta(
    call: AnthropicCall, ctx: RunContext, block: Block, delta: Mapping[str, Any]
) -> None:
    citation = delta.get("citation")
    if citation is not None:
        block.raw.setdefault("citations", []).append(citation)


DELTA_HANDLERS: dict[str, Callable[[AnthropicCall, RunContext, Block, Mapping[str, Any]], None]] = {
    "text_delta": _text_delta,
    "thinking_delta": _thinking_delta,
    "signature_delta": _signature_delta,
    "input_json_delta": _json_delta,
    "citations_delta": _citation_delta,
}


def on_block_delta(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    block = call.blocks.get(_index(event))
    delta = event.get("delta")
    if block is None or not block.open or not isinstance(delta, Mapping):
        return
    handler = DELTA_HANDLERS.get(str(delta.get("type")))
    if handler is not None:
        handler(call, ctx, block, delta)


def on_block_stop(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    block = call.blocks.pop(_index(event), None)
    if block is not None:
        _close_block(call, ctx, block, truncated=False)


EVENT_HANDLERS: dict[str, Handler] = {
    "message_start": on_message_start,
    "content_block_start": on_block_start,
    "content_block_delta": on_block_delta,
    "content_block_stop": on_block_stop,
    "message_delta": on_message_delta,
    "message_stop": on_message_stop,
    "error": on_error,
    "ping": on_ignored,
}


def handle_event(call: AnthropicCall, ctx: RunContext, event: Mapping[str, Any]) -> None:
    """Dispatch one decoded stream event; unknown types are ignored (versioning policy)."""
    EVENT_HANDLERS.get(str(event.get("type")), on_ignored)(call, ctx, event)
