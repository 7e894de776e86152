"""Loopback mock upstreams speaking the real wire formats (OpenAI Chat, OpenAI Responses,
Anthropic Messages, AG-UI over SSE), served by uvicorn on a free port. Each mock records the JSON
request bodies it received and answers with the next scripted response: a list of SSE frames
(where ``DROP`` cuts the connection and ``STALL`` goes silent), or an ``HttpStatus``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.loopback_asgi import serve_asgi

Frames = list[str]
Responder = Callable[[dict[str, Any]], Frames]

#: a frame that cuts the connection (no chunked terminator)
DROP = "\x00drop"
#: a frame after which the upstream sends nothing more, connection open
STALL = "\x00stall"


@dataclass(frozen=True)
class HttpStatus:
    """A scripted answer before any stream: this status and a JSON error body."""

    code: int
    body: dict[str, Any]


@dataclass
class MockUpstream:
    responses: list[Frames | Responder | HttpStatus]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    #: seconds between two frames (a slow upstream)
    delay: float = 0.0
    #: responses whose stream was closed by the client before its last frame
    disconnects: int = 0
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if not self.responses:
            return JSONResponse({"error": {"message": "no scripted response left"}}, 500)
        script = self.responses.pop(0)
        if isinstance(script, HttpStatus):
            return JSONResponse(script.body, script.code)
        frames = script(body) if callable(script) else script

        async def stream() -> AsyncIterator[bytes]:
            sent = 0
            try:
                for frame in frames:
                    if frame == DROP:
                        raise RuntimeError("drop the connection")
                    if frame == STALL:
                        await asyncio.sleep(3600)
                    yield frame.encode()
                    sent += 1
                    await asyncio.sleep(self.delay)
            finally:
                if sent < len(frames) and DROP not in frames:
                    self.disconnects += 1
                    self.disconnected.set()

        return StreamingResponse(stream(), media_type="text/event-stream")


@asynccontextmanager
async def serve_mock(
    responses: Sequence[Frames | Responder | HttpStatus], *, delay: float = 0.0
) -> AsyncIterator[MockUpstream]:
    mock = MockUpstream(list(responses), delay=delay)
    app = Starlette(routes=[Route("/{path:path}", mock.handle, methods=["POST"])])
    async with serve_asgi(app) as port:
        mock.url = f"http://127.0.0.1:{port}/v1/endpoint"
        yield mock


def _data(payload: Any) -> str:
    return f"data: {orjson.dumps(payload).decode()}\n\n"


# ---------------------------------------------------------------- OpenAI Chat Completions


_ids = itertools.count(1)


def openai_frames(
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Frames:
    """A streamed completion: role chunk, reasoning_content, content, tool calls (id and name
    only in each call's first delta, arguments in two fragments), finish, usage, [DONE]."""
    cid = f"chatcmpl-{next(_ids)}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _data(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "mock-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "usage": None,
            }
        )

    frames = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(reasoning):
        frames.append(chunk({"content": None, "reasoning_content": piece}))
    for piece in _pieces(text):
        frames.append(chunk({"content": piece}))
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        first = {"index": index, "id": call_id, "type": "function"}
        first["function"] = {"name": name, "arguments": ""}
        frames.append(chunk({"tool_calls": [first]}))
        for piece in _pieces(arguments):
            frames.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    frames.append(chunk({}, finish))
    usage = usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    frames.append(
        _data({"id": cid, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    )
    frames.append("data: [DONE]\n\n")
    return frames


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    middle = max(1, len(text) // 2)
    return [text[:middle], text[middle:]] if len(text) > 1 else [text]


# ---------------------------------------------------------------- Anthropic Messages


def _event(name: str, payload: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {orjson.dumps({'type': name, **payload}).decode()}\n\n"


def anthropic_frames(
    *,
    text: str = "",
    thinking: str = "",
    signature: str = "sig-mock",
    tool_uses: Sequence[tuple[str, str, str]] = (),
    stop_reason: str | None = None,
) -> Frames:
    frames = [
        _event(
            "message_start",
            {
                "message": {
                    "id": f"msg_{next(_ids)}",
                    "type": "message",
                    "role": "assistant",
                    "model": "mock-claude",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                }
            },
        )
    ]
    index = 0
    if thinking:
        block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        frames.append(_event("content_block_start", {"index": index, "content_block": block}))
        for piece in _pieces(thinking):
            delta = {"type": "thinking_delta", "thinking": piece}
            frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
        delta = {"type": "signature_delta", "signature": signature}
        frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
        frames.append(_event("content_block_stop", {"index": index}))
        index += 1
    if text:
        block = {"type": "text", "text": ""}
        frames.append(_event("content_block_start", {"index": index, "content_block": block}))
        frames.append(_event("ping", {}))
        for piece in _pieces(text):
            delta = {"type": "text_delta", "text": piece}
            frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
        frames.append(_event("content_block_stop", {"index": index}))
        index += 1
    for tool_id, name, arguments in tool_uses:
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        frames.append(_event("content_block_start", {"index": index, "content_block": block}))
        for piece in ["", *_pieces(arguments)]:
            delta = {"type": "input_json_delta", "partial_json": piece}
            frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
        frames.append(_event("content_block_stop", {"index": index}))
        index += 1
    stop = stop_reason or ("tool_use" if tool_uses else "end_turn")
    frames.append(
        _event(
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 7}},
        )
    )
    frames.append(_event("message_stop", {}))
    return frames


# ---------------------------------------------------------------- AG-UI


def agui_frames(events: Sequence[dict[str, Any]]) -> Frames:
    return [_data(event) for event in events]


def agui_run(
    body: dict[str, Any],
    *,
    text: str = "",
    reasoning: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    tool_results: Sequence[tuple[str, Any]] = (),
    outcome: dict[str, Any] | None = None,
) -> Frames:
    """One AG-UI run answering ``body`` (its threadId and runId echoed)."""
    thread, run = body["threadId"], body["runId"]
    n = next(_ids)
    events: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": thread, "runId": run}]
    if reasoning:
        rid = f"rsn_{n}"
        events += [
            {"type": "REASONING_START", "messageId": rid},
            {"type": "REASONING_MESSAGE_START", "messageId": f"r{rid}", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": f"r{rid}", "delta": reasoning},
            {"type": "REASONING_MESSAGE_END", "messageId": f"r{rid}"},
            {"type": "REASONING_END", "messageId": rid},
        ]
    if text:
        mid = f"msg_{n}"
        events += [
            {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
            *(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": piece}
                for piece in _pieces(text)
            ),
            {"type": "TEXT_MESSAGE_END", "messageId": mid},
        ]
    for call_id, name, arguments in tool_calls:
        events += [
            {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
            *(
                {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": piece}
                for piece in _pieces(arguments)
            ),
            {"type": "TOOL_CALL_END", "toolCallId": call_id},
        ]
    for call_id, content in tool_results:
        events.append(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"tool_{n}_{call_id}",
                "toolCallId": call_id,
                "content": content,
                "role": "tool",
            }
        )
    finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread, "runId": run}
    finished["outcome"] = outcome or {"type": "success"}
    events.append(finished)
    return agui_frames(events)


# ---------------------------------------------------------------- OpenAI Responses


def responses_event(name: str, **payload: Any) -> str:
    """One Responses API event as sent: ``event:`` and its JSON with the same ``type``."""
    return f"event: {name}\ndata: {orjson.dumps({'type': name, **payload}).decode()}\n\n"


def responses_frames(
    *,
    text: str = "",
    reasoning: str = "",
    encrypted: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    status: str = "completed",
    incomplete_reason: str = "max_output_tokens",
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    done: bool = False,
) -> Frames:
    """A streamed response as OpenAI sends it (``event:`` + ``data:``, ``sequence_number``):
    a reasoning item (summary deltas, ``encrypted_content`` at item done), a message item,
    function call items (``name``/``call_id`` only at item added, arguments in two deltas, no
    ``name`` at arguments done), then ``response.completed`` / ``.incomplete``, or an ``error``
    event then ``response.failed``; ``[DONE]`` after it when ``done``."""
    seq = itertools.count()
    rid = f"resp_{next(_ids)}"
    frames: Frames = []

    def emit(name: str, **payload: Any) -> None:
        frames.append(responses_event(name, sequence_number=next(seq), **payload))

    def response(state: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "model": "gpt-mock",
            "status": state,
            "output": [],
            "usage": None,
            **extra,
        }

    emit("response.created", response=response("in_progress"))
    emit("response.in_progress", response=response("in_progress"))
    index = 0
    if reasoning:
        item_id = f"rs_{rid}"
        emit(
            "response.output_item.added",
            output_index=index,
            item={"id": item_id, "type": "reasoning", "summary": []},
        )
        part: dict[str, Any] = {"type": "summary_text", "text": ""}
        emit(
            "response.reasoning_summary_part.added",
            item_id=item_id,
            output_index=index,
            summary_index=0,
            part=part,
        )
        for piece in _pieces(reasoning):
            emit(
                "response.reasoning_summary_text.delta",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                delta=piece,
            )
        emit(
            "response.reasoning_summary_text.done",
            item_id=item_id,
            output_index=index,
            summary_index=0,
            text=reasoning,
        )
        item = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": reasoning}],
        }
        if encrypted:
            item["encrypted_content"] = encrypted
        emit("response.output_item.done", output_index=index, item=item)
        index += 1
    if text:
        item_id = f"msg_{rid}"
        added = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        emit("response.output_item.added", output_index=index, item=added)
        part = {"type": "output_text", "text": "", "annotations": []}
        emit(
            "response.content_part.added",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part=part,
        )
        for piece in _pieces(text):
            emit(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=piece,
                logprobs=[],
            )
        emit(
            "response.output_text.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            text=text,
            logprobs=[],
        )
        final = {**added, "status": "completed", "content": [{**part, "text": text}]}
        emit("response.output_item.done", output_index=index, item=final)
        index += 1
    for call_id, name, arguments in tool_calls:
        item_id = f"fc_{call_id}"
        added = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        emit("response.output_item.added", output_index=index, item=added)
        for piece in _pieces(arguments):
            emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=piece,
            )
        emit(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            arguments=arguments,
        )
        emit(
            "response.output_item.done",
            output_index=index,
            item={**added, "status": "completed", "arguments": arguments},
        )
        index += 1
    usage = usage or {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 3 if reasoning else 0},
        "total_tokens": 15,
    }
    if error is not None:
        emit("error", error=error)
        emit("response.failed", response=response("failed", error=error))
    elif status == "incomplete":
        details = {"reason": incomplete_reason}
        emit(
            "response.incomplete",
            response=response("incomplete", incomplete_details=details, usage=usage),
        )
    else:
        emit("response.completed", response=response("completed", usage=usage))
    if done:
        frames.append("data: [DONE]\n\n")
    return frames


def responses_every_item_frames() -> Frames:
    """One response with every kind of output item the provider maps: reasoning, a message,
    two function calls, a custom tool call, an OpenAI-executed web search, a client-executed
    local shell call and a refusal."""
    frames = responses_frames(
        reasoning="Think.", text="Text.", tool_calls=[("c1", "f", '{"a":1}'), ("c2", "g", "{}")]
    )
    custom = {"type": "custom_tool_call", "id": "ctc", "call_id": "cc", "name": "grep"}
    search = {"type": "web_search_call", "id": "ws"}
    refusal = {"type": "message", "id": "msg_r", "role": "assistant", "content": []}
    added, done = "response.output_item.added", "response.output_item.done"
    extra = [
        responses_event(added, output_index=4, item={**custom, "input": ""}),
        responses_event("response.custom_tool_call_input.delta", output_index=4, delta="ab"),
        responses_event(done, output_index=4, item={**custom, "input": "abc"}),
        responses_event(added, output_index=5, item=search),
        responses_event("response.web_search_call.completed", output_index=5, item_id="ws"),
        responses_event(
            added, output_index=6, item={"type": "local_shell_call", "id": "ls", "call_id": "lc"}
        ),
        responses_event(added, output_index=7, item=refusal),
        responses_event(
            "response.content_part.added",
            output_index=7,
            content_index=0,
            part={"type": "refusal", "refusal": ""},
        ),
        responses_event("response.refusal.delta", output_index=7, content_index=0, delta="No."),
        responses_event(done, output_index=7, item=refusal),
    ]
    return [*frames[:-1], *extra, frames[-1]]
