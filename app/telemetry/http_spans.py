"""The SERVER span of each HTTP request and WebSocket, made inside the gateway's ASGI app.

Not a middleware around the app: :class:`app.factory.GatewayApp` calls :func:`serve_traced`
only when telemetry is on. The span continues an incoming ``traceparent`` and is the current
span while the request is served, so a run it accepts stores it as its parent. The span is
named ``{method} {route}`` once the router matched. Its status code is read from the
``http.response.start`` message the app sends; the SSE stream writes its body to the server's
own ``send`` (``app/streams/sse.py``), past this one, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from starlette.types import Message, Receive, Scope, Send

from app.telemetry.logs import span_in_logs
from app.telemetry.propagation import context_of_headers

__all__ = ["Serve", "serve_traced"]

#: The app's own call: ``(scope, receive, server_send, app_send)``.
Serve = Callable[[Scope, Receive, Send, Send], Awaitable[None]]


async def serve_traced(
    tracer: Tracer, scope: Scope, receive: Receive, send: Send, serve: Serve
) -> None:
    """Serve one request or WebSocket under its SERVER span."""
    method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
    path: str = scope.get("path", "")
    span = tracer.start_span(
        method,
        context=context_of_headers(scope.get("headers") or ()),
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": method,
            "url.path": path,
            "url.scheme": scope.get("scheme", "http"),
        },
    )
    status: list[int] = []

    async def traced_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message["status"]))
        await send(message)

    try:
        with span_in_logs(span):
            await serve(scope, receive, send, traced_send)
    except BaseException as error:  # its type only: an error's text is never exported
        span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
        raise
    finally:
        _finish(span, scope, method, status)


def _finish(span: Span, scope: Scope, method: str, status: list[int]) -> None:
    route: Any = scope.get("route")
    template = getattr(route, "path", None)
    attributes: dict[str, str | int] = {}
    if isinstance(template, str):
        span.update_name(f"{method} {template}")
        attributes["http.route"] = template
    if status:
        attributes["http.response.status_code"] = status[0]
        if status[0] >= 500:
            span.set_status(Status(StatusCode.ERROR, str(status[0])))
    if attributes:  # one call: the span's lock and attribute checks once
        span.set_attributes(attributes)
    span.end()
