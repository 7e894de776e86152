"""The gateway object: settings, backend, providers, runs and the shutdown sequence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from app.archive import Archive
from app.backends import Backend, ConversationRef, Snapshot, create_backend
from app.config import Settings
from app.observability.metrics import GatewayMetrics, InstrumentedBackend
from app.observability.webhooks import WebhookDispatcher
from app.runs.catalog import ProviderCatalog
from app.runs.ending import RunEndHooks
from app.runs.manager import RunManager
from app.streams.snapshot import snapshot_object
from app.telemetry import create_telemetry
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
        live = backend or create_backend(settings)
        label = type(live).__name__.lower().removesuffix("backend")  # the metrics' backend label
        #: Durable conversations of [archive] (app/archive); None when off.
        self.archive: Archive | None = None
        if settings.archive.url:
            self.archive = Archive(settings.archive, self.metrics.registry)
            live = self.archive.wrap(live)
        self.backend: Backend = InstrumentedBackend(live, self.metrics, label)
        self.runs = RunManager(self.backend, self.catalog, settings, self.metrics)
        #: OpenTelemetry traces and GenAI metrics of [telemetry] (app/telemetry); None when off.
        self.telemetry = create_telemetry(settings, self.metrics.registry)
        self.runs.telemetry = self.telemetry
        self.runs.archive = self.archive
        #: Completion webhooks of [webhooks] (app/observability/webhooks/); off without a url.
        #: Their outbox is the backend's when instances share one (Redis), else in process.
        hooks = settings.webhooks
        self.webhooks = WebhookDispatcher(
            hooks,
            self.backend,
            self.metrics.registry,
            outbox=self.backend.webhook_outbox() if hooks.url else None,
        )
        #: What follows every run's end, also of a run a lost instance owned (app/runs/ending.py).
        self.runs.run_end = RunEndHooks(self.archive, self.webhooks, self.telemetry)
        self.runs.run_end.backend = self.backend
        if self.runs.run_end.any:
            self.backend.watch_lost_runs(self.runs.run_end)
        #: Set once every run has ended at shutdown: streams finish what is logged, then close.
        self.closing = asyncio.Event()
        self._drained: asyncio.Task[None] | None = None
        self._sockets = 0
        self._sockets_closed = asyncio.Event()
        self._sockets_closed.set()

    async def start(self) -> None:
        await self.backend.start()
        if self.archive is not None:
            await self.archive.start()
        await self.webhooks.start()

    async def find_snapshot(self, ref: ConversationRef) -> Snapshot | None:
        """The live snapshot, else the archived one (None when neither holds ``ref``)."""
        snapshot = await self.backend.snapshot(ref)
        if snapshot is None and self.archive is not None:
            snapshot = await self.archive.snapshot(ref)
        return snapshot

    async def snapshot(self, ref: ConversationRef) -> dict[str, Any]:
        return snapshot_object(ref.key, await self.find_snapshot(ref))

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
        if self.archive is not None:  # its writer reads the live backend: before it closes
            await self.archive.close(max(5.0, self.settings.gateway.shutdown_grace_seconds))
        await self.backend.close()
        if self.telemetry is not None:  # the last spans (drain, reaper) go out before exit
            await asyncio.to_thread(self.telemetry.shutdown)
