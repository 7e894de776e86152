"""A scripted AG-UI agent on loopback (real AG-UI SSE) behind the gateway's ``ag-ui`` provider,
for the AG-UI endpoint tests (Python and Node). The last user message picks the script:

- ``hello``: one assistant text message;
- ``weather``: a call of the frontend tool ``get_weather``; answered (a ``tool`` message at the
  end of the history), the text ``It is sunny in Paris.``;
- ``approve``: RUN_FINISHED with an interrupt; resumed, a text naming the decision;
- ``slow``: a long text, one delta every 50 ms (for aborts);
- ``everything``: reasoning, a step, shared state, an activity, a CUSTOM event, a runtime tool
  call with its result, a text, then an interrupt;
- ``fail``: RUN_ERROR.

``GET /stats`` answers ``{"requests", "disconnects"}``; a disconnect is a response whose
client closed it before its last frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.config import Settings
from tests.app.support.gateway_server import make_settings
from tests.loopback_asgi import serve_asgi

__all__ = ["AguiAgent", "agui_settings", "serve_agui_agent"]

Event = dict[str, Any]


def _text(mid: str, text: str, pieces: int = 3) -> list[Event]:
    size = max(1, len(text) // pieces)
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
        *({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": c} for c in chunks),
        {"type": "TEXT_MESSAGE_END", "messageId": mid},
    ]


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def _interrupt(reason: str, message: str) -> Event:
    return {
        "type": "interrupt",
        "interrupts": [{"id": "approval-1", "reason": reason, "message": message}],
    }


@dataclass
class AguiAgent:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnects: int = 0
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    #: seconds between two frames of the ``slow`` script
    slow_delay: float = 0.05

    def script(self, body: dict[str, Any]) -> tuple[list[Event], float]:
        prompt = _last_user_text(body)
        messages = body.get("messages") or []
        last_role = messages[-1].get("role") if messages else None
        resume = body.get("resume") or []
        n = len(self.requests)
        if "weather" in prompt:
            if last_role == "tool":
                return _text(f"m{n}", "It is sunny in Paris."), 0.0
            return [
                {"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "get_weather"},
                {"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": '{"city": '},
                {"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": '"Paris"}'},
                {"type": "TOOL_CALL_END", "toolCallId": "call-1"},
            ], 0.0
        if "approve" in prompt or "everything" in prompt:
            if resume:
                payload = resume[0].get("payload") or {}
                decision = payload.get("decision", resume[0].get("status"))
                return _text(f"m{n}", f"Decision: {decision}."), 0.0
            if "approve" in prompt:
                return [], 0.0
            return self._everything(n), 0.0
        if "slow" in prompt:
            return _text(f"m{n}", "tick " * 400, pieces=400), self.slow_delay
        if "fail" in prompt:
            return [{"type": "RUN_ERROR", "message": "The agent broke.", "code": "agent_broke"}], 0
        return _text(f"m{n}", "Hello from the gateway!"), 0.0

    @staticmethod
    def _everything(n: int) -> list[Event]:
        return [
            {"type": "REASONING_START", "messageId": f"r{n}"},
            {"type": "REASONING_MESSAGE_START", "messageId": f"rm{n}", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": f"rm{n}", "delta": "Thinking."},
            {"type": "REASONING_MESSAGE_END", "messageId": f"rm{n}"},
            {"type": "REASONING_END", "messageId": f"r{n}"},
            {"type": "STEP_STARTED", "stepName": "lookup"},
            {"type": "STATE_SNAPSHOT", "snapshot": {"count": 1}},
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/count", "value": 2}]},
            {
                "type": "ACTIVITY_SNAPSHOT",
                "messageId": "act-1",
                "activityType": "search",
                "content": {"query": "paris"},
            },
            {"type": "CUSTOM", "name": "progress", "value": {"done": 1}},
            {"type": "TOOL_CALL_START", "toolCallId": "srv-1", "toolCallName": "search"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "srv-1", "delta": '{"q": "paris"}'},
            {"type": "TOOL_CALL_END", "toolCallId": "srv-1"},
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"t{n}",
                "toolCallId": "srv-1",
                "content": "3 results",
                "role": "tool",
            },
            {"type": "STEP_FINISHED", "stepName": "lookup"},
            *_text(f"m{n}", "Here is what I found."),
        ]

    async def handle(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        events, delay = self.script(body)
        prompt = _last_user_text(body)
        opening: Event = {
            "type": "RUN_STARTED",
            "threadId": body["threadId"],
            "runId": body["runId"],
        }
        frames: list[Event] = [opening, *events]
        if not events or events[-1]["type"] != "RUN_ERROR":
            finished: Event = {
                "type": "RUN_FINISHED",
                "threadId": body["threadId"],
                "runId": body["runId"],
            }
            interrupted = ("approve" in prompt or "everything" in prompt) and not body.get("resume")
            if interrupted:
                finished["outcome"] = _interrupt("confirm", "Go ahead?")
            frames.append(finished)
        return StreamingResponse(self._stream(frames, delay), media_type="text/event-stream")

    async def _stream(self, frames: list[Event], delay: float) -> AsyncIterator[bytes]:
        sent = 0
        try:
            for frame in frames:
                yield b"data: " + orjson.dumps(frame) + b"\n\n"
                sent += 1
                if delay:
                    await asyncio.sleep(delay)
        finally:
            if sent < len(frames):
                self.disconnects += 1
                self.disconnected.set()

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"requests": len(self.requests), "disconnects": self.disconnects})


@asynccontextmanager
async def serve_agui_agent() -> AsyncIterator[AguiAgent]:
    agent = AguiAgent()
    app = Starlette(
        routes=[
            Route("/agent", agent.handle, methods=["POST"]),
            Route("/stats", agent.stats, methods=["GET"]),
        ]
    )
    async with serve_asgi(app) as port:
        agent.url = f"http://127.0.0.1:{port}/agent"
        yield agent


def agui_settings(agent: AguiAgent, **gateway: Any) -> Settings:
    """Gateway settings with the provider ``agent`` (kind ``ag-ui``) in front of ``agent``."""
    return make_settings(
        gateway={"default_provider": "agent", **gateway},
        providers={"agent": {"kind": "ag-ui", "url": agent.url}},
    )
