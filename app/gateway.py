"""The gateway object: settings, backend, providers, runs and the shutdown sequence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from app.backends import Backend, ConversationRef, create_backend
from app.config import Settings
from app.observability.metrics import GatewayMetrics, InstrumentedBackend
from app.observability.webhooks import WebhookDispatcher
from app.runs.catalog import ProviderCatalog
from app.runs.manager import RunManager
from app.streams.snapshot import snapshot_object
from providers.contract import AgentProvider

__all__ = ["Gateway"]

logger = logging.getLogger("app.gateway")
SOCKET_CLOSE_SECONDS = 5.0


class Gateway:
    """Everything a request needs; one per app (``app.state.gateway``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        backend: Backend | None = None,
        providers: Mapping[str, AgentProvider] | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = ProviderCatalog(settings, providers)
        #: Prometheus metrics of this gateway (app/observability/metrics); served at /metrics.
        self.metrics = GatewayMetrics(providers=self.catalog.names())
        self.backend: Backend = InstrumentedBackend(
            backend or create_backend(settings), self.metrics
        )
        self.runs = RunManager(self.backend, self.catalog, settings, self.metrics)
        #: Completion webhooks of [webhooks] (app/observability/webhooks.py); off without a url.
        self.webhooks = WebhookDispatcher(settings.webhooks, self.backend, self.metrics.registry)
        if self.webhooks.enabled:
            self.runs.run_listeners.append(self.webhooks.run_ended)
        #: Set once every run has ended at shutdown: streams finish what is logged, then close.
        self.closing = asyncio.Event()
        self._drained: asyncio.Task[None] | None = None
        self._sockets = 0
        self._sockets_closed = asyncio.Event()
        self._sockets_closed.set()

    async def start(self) -> None:
        await self.backend.start()
        self.webhooks.start()

    async def snapshot(self, ref: ConversationRef) -> dict[str, Any]:
        return snapshot_object(ref.key, await self.backend.snapshot(ref))

    @contextlib.contextmanager
    def track_socket(self) -> Iterator[None]:
        """Count an open WebSocket: the drain waits for them to close themselves (1001)."""
        self._sockets += 1
        self._sockets_closed.clear()
        try:
            yield
        finally:
            self._sockets -= 1
            if self._sockets == 0:
                self._sockets_closed.set()

    async def drain(self) -> None:
        """Graceful shutdown; idempotent and safe to await from several places."""
        if self._drained is None:
            self._drained = asyncio.ensure_future(self._drain())
        await asyncio.shield(self._drained)

    async def _drain(self) -> None:
        grace = self.settings.gateway.shutdown_grace_seconds
        logger.info("draining: %d active conversation(s)", self.runs.active_count())
        await self.runs.drain(grace)
        self.closing.set()
        self.backend.wake_readers()
        # SSE responses end by themselves; sockets must close (1001) before uvicorn's own
        # shutdown closes them with 1012.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._sockets_closed.wait(), SOCKET_CLOSE_SECONDS)

    async def close(self) -> None:
        await self.drain()
        await self.webhooks.close(max(1.0, self.settings.gateway.shutdown_grace_seconds))
        await self.catalog.aclose()
        await self.backend.close()
