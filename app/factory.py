"""``create_app(settings)``: the FastAPI application of the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from sse_starlette.sse import AppStatus
from starlette.types import Receive, Scope, Send

from app.api.errors import install_error_handlers
from app.api.responses import JSON
from app.api.routes import ag_ui, commands, conversations, events, system, ws
from app.api.webhooks_doc import document_webhooks
from app.backends import Backend
from app.compat import uvicorn_fast
from app.config import Settings, load_settings
from app.gateway import Gateway
from app.observability.logs import RequestContextMiddleware, collect_secrets, register_secrets
from app.streams.sse import SERVER_SEND_EXTENSION, TRANSPORT_EXTENSION
from app.telemetry import Telemetry
from app.telemetry.http_spans import serve_traced
from providers.contract import AgentProvider

__all__ = ["TRANSPORT_EXTENSION", "GatewayApp", "create_app"]

API_VERSION = "1.0.0"
#: ``examples/antd-x-chat``'s build in a checkout (an installed wheel has none: nothing mounted).
EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "antd-x-chat" / "dist"


class GatewayApp(FastAPI):
    """FastAPI, plus (on uvicorn's fast path, ``app/compat/uvicorn_fast.py``) the server's
    transport and ``send`` in ``scope["extensions"]``.

    A subscriber dropped for a blocked send must free what its socket buffer pins at once; a
    graceful close would wait for a peer that never reads. An SSE stream writes its body
    through the server's ``send``, past the middleware (see ``app/streams/sse.py``).
    """

    #: Set by ``create_app``: ``[gateway] fast_paths`` and uvicorn's internals as expected.
    uvicorn_fast_path = False

    #: Set by ``create_app`` when ``[telemetry] enabled``: each request's SERVER span.
    telemetry: Telemetry | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        telemetry = self.telemetry
        if telemetry is None or scope["type"] not in ("http", "websocket"):
            await self._serve(scope, receive, send, send)
            return
        await serve_traced(telemetry.tracer, scope, receive, send, self._serve)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, app_send: Send) -> None:
        """Serve with the server's ``send`` (``app_send``: what the app's responses call)."""
        if self.uvicorn_fast_path and scope["type"] in ("http", "websocket"):
            extensions = scope.setdefault("extensions", {})
            transport = uvicorn_fast.transport_of(send)
            if transport is not None:
                extensions[TRANSPORT_EXTENSION] = transport
            if scope["type"] == "http":
                extensions[SERVER_SEND_EXTENSION] = send
            try:
                await super().__call__(scope, receive, app_send)
            finally:
                # ``send`` is the server's bound method, and the server's request object holds
                # this scope: left here, the pair is a reference cycle that keeps the whole
                # connection (protocol, transport, response) until a full collection.
                extensions.pop(SERVER_SEND_EXTENSION, None)
                extensions.pop(TRANSPORT_EXTENSION, None)
            return
        await super().__call__(scope, receive, app_send)


def create_app(
    settings: Settings | None = None,
    *,
    providers: Mapping[str, AgentProvider] | None = None,
    backend: Backend | None = None,
) -> FastAPI:
    """Build the app. ``providers`` replaces configured providers by name (embedding, tests)."""
    settings = settings or load_settings()
    # Scrubbed from every log line (app/observability/logs/redaction.py).
    register_secrets(collect_secrets(settings))
    gateway = Gateway(settings, backend=backend, providers=providers)
    # Streams are closed by the gateway's own drain (after run.cancelled is delivered), not by
    # sse-starlette's immediate cancel on SIGTERM.
    AppStatus.enable_automatic_graceful_drain = False

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.close()

    app = GatewayApp(
        title="Agent Event Gateway",
        version=API_VERSION,
        description="Provider-neutral BFF gateway for Agent Event protocol 0.1.",
        default_response_class=JSON,
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry instrumentation (FastAPI >= 0.165, when the SDK is
        # installed) stays off: the gateway's spans are its own ([telemetry], app/telemetry),
        # made only when enabled, and FastAPI's would check the global providers per request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.gateway = gateway
    app.uvicorn_fast_path = settings.gateway.fast_paths and uvicorn_fast.available()
    app.telemetry = gateway.telemetry
    document_webhooks(app)  # OpenAPI only: what [webhooks] url receives (app/api/webhooks_doc.py)
    install_error_handlers(app)
    if settings.gateway.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.gateway.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    app.add_middleware(RequestContextMiddleware)  # request id + access line
    for module in (conversations, events, commands, ws, ag_ui, system):
        app.include_router(module.router)
    if settings.gateway.demo_page and system.STATIC_DIR.is_dir():
        # The client's modules first: /static/client is inside /static's path space.
        if system.CLIENT_DIR.is_dir():
            app.mount("/static/client", StaticFiles(directory=system.CLIENT_DIR), name="client")
        app.mount("/static", StaticFiles(directory=system.STATIC_DIR), name="static")
        if EXAMPLE_DIR.is_dir():  # the built Ant Design X example (`make example`), same origin
            app.mount("/example", StaticFiles(directory=EXAMPLE_DIR, html=True), name="example")
    return app
