"""The request context middleware: a request id per HTTP/WebSocket request, one access line.

Pure ASGI. The id is the client's ``X-Request-ID`` when it sent a sane one; the conversation key
is bound from the path; the access line leaves the query string out (it may hold
``access_token``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs.context import log_context

__all__ = ["RequestContextMiddleware"]

_REQUEST_ID_RE: Final = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_CONVERSATION_RE: Final = re.compile(r"^/v1/conversations/([A-Za-z0-9._:-]{1,128})(?:/|$)")
_access_log = logging.getLogger("agent_gateway.access")


class RequestContextMiddleware:
    """Binds ``request_id`` and ``conversation`` for the request and logs one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                if _REQUEST_ID_RE.match(candidate):
                    request_id = candidate
                break
        request_id = request_id or uuid.uuid4().hex
        path: str = scope.get("path", "")
        match = _CONVERSATION_RE.match(path)
        status: list[int] = []

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "websocket.accept":
                status.append(101)
            await send(message)

        start = time.perf_counter()
        with log_context(request_id=request_id, conversation=match.group(1) if match else None):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                _access_log.info(
                    "%s %s %s",
                    scope.get("method", "WS"),
                    path,
                    status[0] if status else "-",
                    extra={
                        "method": scope.get("method", "WS"),
                        "path": path,
                        "status": status[0] if status else None,
                        "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                    },
                )
