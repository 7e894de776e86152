"""A fast mock upstream as raw ASGI: OpenAI-compatible Chat Completions and an AG-UI agent.

The workload is read from the last user message text, so the gateway, the baselines and a
peer (CopilotKit) drive it the same way: ``bench n=20000 delay=1 tag=abc`` streams 20,000
content deltas, sleeping ``delay`` ms between them (0: as fast as possible, ``burst`` chunks per
write, 64 unless the prompt says ``burst=N``). Every delta's text is ``t=<emit time>;``
(``time.time()`` with µs), so a client can measure delivery latency from the bytes it receives.
When a client disconnects, the time is recorded under ``tag`` and served by
``GET /disconnects/<tag>`` (abort latency).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

__all__ = ["Workload", "app", "parse_workload", "prompt"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_WORD = re.compile(r"(n|delay|tag|burst)=([\w.\-]+)")
#: With ``delay=0`` this many chunks go into one write (the mock must never be the bottleneck).
BURST = 64
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
]


class Workload:
    __slots__ = ("burst", "delay", "n", "tag")

    def __init__(self, n: int = 100, delay: float = 0.0, tag: str = "", burst: int = BURST) -> None:
        self.n = n
        self.delay = delay
        self.tag = tag
        #: With ``delay=0``: chunks per write (one TCP read of the reader, roughly).
        self.burst = max(1, burst)


def prompt(n: int, delay_ms: float = 0.0, tag: str = "", burst: int | None = None) -> str:
    """The user message text that asks the mock for this workload."""
    text = f"bench n={n} delay={delay_ms:g}"
    if burst is not None:
        text += f" burst={burst}"
    return f"{text} tag={tag}" if tag else text


def parse_workload(text: str) -> Workload:
    found = dict(_WORD.findall(text))
    return Workload(
        n=int(found.get("n", 100)),
        delay=float(found.get("delay", 0)) / 1000.0,
        tag=found.get("tag", ""),
        burst=int(found.get("burst", BURST)),
    )


def _last_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


# --- wire formats ------------------------------------------------------------------------


def _openai_frames(n: int) -> tuple[Callable[[], bytes], Callable[[], bytes], bytes, bytes]:
    head = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench",'
    first = head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    last = (
        head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n'
        b"data: [DONE]\n\n" % (n, n + 5)
    )

    def delta() -> bytes:
        return head + b'"choices":[{"index":0,"delta":{"content":"t=%.6f;"}}]}\n\n' % time.time()

    def start() -> bytes:
        return first

    return start, delta, b"", last


def _agui_frames(
    thread: str, run: str
) -> tuple[Callable[[], bytes], Callable[[], bytes], bytes, bytes]:
    def ev(obj: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    started = ev({"type": "RUN_STARTED", "threadId": thread, "runId": run})
    msg_start = ev({"type": "TEXT_MESSAGE_START", "messageId": "m-bench", "role": "assistant"})
    end = ev({"type": "TEXT_MESSAGE_END", "messageId": "m-bench"}) + ev(
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run}
    )

    def delta() -> bytes:
        return (
            b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m-bench","delta":"t=%.6f;"}\n\n'
            % time.time()
        )

    def start() -> bytes:
        return started + msg_start

    return start, delta, b"", end


# --- the app -----------------------------------------------------------------------------


class MockUpstream:
    def __init__(self) -> None:
        self.disconnects: dict[str, float] = {}
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if method == "GET" and path.startswith("/disconnects/"):
            value = self.disconnects.get(path.rsplit("/", 1)[1])
            await _json(send, 200, {"t": value})
            return
        if method == "GET" and path == "/healthz":
            await _json(send, 200, {"ok": True, "requests": self.requests})
            return
        if method != "POST":
            await _json(send, 404, {"error": "not found"})
            return
        body = await _read_body(receive)
        try:
            data = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            await _json(send, 400, {"error": "bad json"})
            return
        self.requests += 1
        if path.endswith("/chat/completions"):
            work = parse_workload(_last_user_text(data.get("messages")))
            frames = _openai_frames(work.n)
        elif path.startswith("/agui"):
            work = parse_workload(_last_user_text(data.get("messages")))
            frames = _agui_frames(str(data.get("threadId", "t")), str(data.get("runId", "r")))
        else:
            await _json(send, 404, {"error": "not found"})
            return
        await self._stream(receive, send, work, frames)

    async def _stream(
        self,
        receive: Receive,
        send: Send,
        work: Workload,
        frames: tuple[Callable[[], bytes], Callable[[], bytes], bytes, bytes],
    ) -> None:
        start, delta, _, end = frames
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if work.tag:
                        self.disconnects[work.tag] = time.time()
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": start(), "more_body": True})
            sent = 0
            while sent < work.n and not gone.is_set():
                if work.delay > 0:
                    await asyncio.sleep(work.delay)
                    body = delta()
                    sent += 1
                else:
                    count = min(work.burst, work.n - sent)
                    body = b"".join([delta() for _ in range(count)])
                    sent += count
                await send({"type": "http.response.body", "body": body, "more_body": True})
                if work.delay <= 0:
                    await asyncio.sleep(0)  # let the disconnect watcher run
            if not gone.is_set():
                await send({"type": "http.response.body", "body": end, "more_body": False})
        finally:
            watcher.cancel()


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _json(send: Send, status: int, obj: Any) -> None:
    body = orjson.dumps(obj)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


app = MockUpstream()
