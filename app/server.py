"""Serving with uvicorn, with the gateway's graceful shutdown before uvicorn's own.

On SIGTERM/SIGINT uvicorn leaves its main loop and calls ``shutdown``; we first drain the
gateway (503 ``shutting_down`` for new runs, grace for active runs, then abort → every stream
receives ``run.cancelled`` and closes), then let uvicorn close connections and run the lifespan.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI

from app.gateway import Gateway
from app.gc_policy import tune_for_serving
from app.observability.logs import setup_logging
from app.runs.limits import ws_max_size

__all__ = ["GatewayServer", "serve"]


class GatewayServer(uvicorn.Server):
    """``tune_gc`` (default: ``install_signal_handlers``, i.e. the server owns its process)
    applies :func:`app.gc_policy.tune_for_serving` once the app has started."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        install_signal_handlers: bool = True,
        tune_gc: bool | None = None,
    ) -> None:
        super().__init__(config)
        self._install_signal_handlers = install_signal_handlers
        self._tune_gc = install_signal_handlers if tune_gc is None else tune_gc
        gateway = getattr(getattr(config.app, "state", None), "gateway", None)
        if isinstance(gateway, Gateway):  # never buffer a WebSocket message beyond this
            config.ws_max_size = ws_max_size(gateway.settings.limits.max_ws_frame_bytes)

    @property
    def gateway(self) -> Gateway:
        app = self.config.app
        assert isinstance(app, FastAPI)
        gateway: Gateway = app.state.gateway
        return gateway

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if not self._install_signal_handlers:
            yield
            return
        with super().capture_signals():
            yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._tune_gc and not self.should_exit:
            tune_for_serving()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.gateway.drain()
        await super().shutdown(sockets)


def serve(app: FastAPI, host: str, port: int, *, log_level: str = "info") -> None:
    """Run the app until SIGTERM/SIGINT (one process; scale out with the Redis backend)."""
    gateway: Gateway = app.state.gateway
    # Our JSON/text handler with redaction; log_config=None keeps uvicorn from installing its
    # own handlers (its access log would print query strings, which may hold access_token).
    setup_logging(gateway.settings, level=log_level)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        proxy_headers=True,
        lifespan="on",
    )
    GatewayServer(config).run()
