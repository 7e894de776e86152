"""Completion webhooks (``[webhooks]``): a signed POST when a run ends, at least once.

When a run ends, whoever ends it (its owner, or the instance that reaped a lost owner's run)
computes the webhook once (:func:`.payload.webhook_entry`) and puts it in the outbox before the
run slot is released, so an instance that dies right after the run's end has already handed it
over. With a durable outbox (Redis) any live instance delivers it; the memory backend's outbox
is in process. A slow or unreachable backend never holds a run's end for more than
``enqueue_wait_seconds``: the enqueue goes on in the background (bounded by the give-up time).

Workers take due entries, POST them and retry failures with backoff about the time since the
run ended (so from any instance), until ``give_up_seconds`` after it: then the delivery is
counted ``failed`` and a WARNING names it. Every attempt carries the same body and
``X-Gateway-Delivery`` id, signed afresh (:mod:`.signing`). Outcomes are counted in
``agent_gateway_webhook_deliveries_total`` and failed attempts in
``agent_gateway_webhook_attempt_failures_total``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter

from app.backends import ConversationRef, Snapshots
from app.backends.webhook_outbox import OutboxEntry, OutboxFull, WebhookOutbox
from app.config import WebhooksSection
from app.observability.webhooks.memory_outbox import MemoryOutbox
from app.observability.webhooks.payload import webhook_entry
from app.observability.webhooks.signing import sign_payload

__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "WebhookDispatcher"]

logger = logging.getLogger("app.webhooks")
SIGNATURE_HEADER = "X-Gateway-Signature"
DELIVERY_HEADER = "X-Gateway-Delivery"
EVENT_HEADER = "X-Gateway-Event"


class WebhookDispatcher:
    """Puts run ends in the outbox and delivers what the outbox hands this instance."""

    def __init__(
        self,
        config: WebhooksSection,
        backend: Snapshots,
        registry: CollectorRegistry | None = None,
        *,
        outbox: WebhookOutbox | None = None,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 60.0,
        timeout_seconds: float = 10.0,
        queue_max: int = 10000,
        workers: int = 4,
        enqueue_wait_seconds: float = 1.0,
    ) -> None:
        self.url = config.url
        self.secret = config.secret
        self.events = frozenset(config.events)
        self.give_up_seconds = config.give_up_seconds
        self.backend = backend
        self.outbox: WebhookOutbox = outbox if outbox is not None else MemoryOutbox(queue_max)
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.timeout_seconds = timeout_seconds
        self.worker_count = workers
        self.enqueue_wait_seconds = enqueue_wait_seconds
        self._workers: list[asyncio.Task[None]] = []
        #: Run ends not yet in the outbox (the backend was slow or down).
        self._enqueuing: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        registry = registry if registry is not None else CollectorRegistry()
        self.deliveries = Counter(
            "agent_gateway_webhook_deliveries",
            "Webhook deliveries by outcome (delivered, failed: given up, dropped: never queued).",
            ["event", "outcome"],
            registry=registry,
        )
        self.attempt_failures = Counter(
            "agent_gateway_webhook_attempt_failures",
            "Webhook attempts that failed (non-2xx or no answer); each may be retried.",
            ["event"],
            registry=registry,
        )

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    async def start(self) -> None:
        if not self.enabled or self._workers:
            return
        await self.outbox.start()
        self._client = httpx.AsyncClient(timeout=self.timeout_seconds, follow_redirects=False)
        self._workers = [
            asyncio.create_task(self._work(), name=f"webhooks-{i}")
            for i in range(self.worker_count)
        ]

    async def pending(self) -> int:
        """Webhooks not yet delivered nor given up (on every instance, for a shared outbox)."""
        return len(self._enqueuing) + await self.outbox.pending()

    async def close(self, grace: float = 5.0) -> None:
        """Finish enqueueing and, for an in-process outbox, delivering, for up to ``grace`` s."""
        if not self._workers:
            return
        deadline = time.monotonic() + grace
        if self._enqueuing:
            await asyncio.wait(set(self._enqueuing), timeout=grace)
        await self.outbox.drain(max(0.0, deadline - time.monotonic()))
        for task in [*self._workers, *self._enqueuing]:
            task.cancel()
        await asyncio.gather(*self._workers, *self._enqueuing, return_exceptions=True)
        self._workers = []
        await self.outbox.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- enqueueing ----------------------------------------------------------------------
    async def run_ended(self, ref: ConversationRef, run_id: str) -> None:
        """A run owned here ended (awaited before its slot is released; bounded)."""
        await self._enqueue(ref, run_id, None)

    async def run_lost(self, ref: ConversationRef, run_id: str, run: dict[str, Any]) -> None:
        """This instance ends ``run`` because its owner was lost (before the end is written)."""
        await self._enqueue(ref, run_id, run)

    async def _enqueue(self, ref: ConversationRef, run_id: str, run: dict[str, Any] | None) -> None:
        if not self._workers:
            return
        task = asyncio.create_task(self._put(ref, run_id, run), name=f"webhook-put-{run_id}")
        self._enqueuing.add(task)
        task.add_done_callback(self._enqueuing.discard)
        await asyncio.wait({task}, timeout=self.enqueue_wait_seconds)

    async def _put(self, ref: ConversationRef, run_id: str, run: dict[str, Any] | None) -> None:
        """Read the run (unless given), compute its entry once, store it; retried while the
        backend fails, for at most ``give_up_seconds``."""
        deadline = time.monotonic() + self.give_up_seconds
        entry: OutboxEntry | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                if entry is None:
                    record = run if run is not None else await self._run_record(ref, run_id)
                    entry = webhook_entry(ref, run_id, record, self.events)
                    if entry is None:
                        return  # not ended, or not an event the receiver wants
                await self.outbox.put(entry)
                return
            except OutboxFull:
                self.deliveries.labels(entry.event if entry else "unknown", "dropped").inc()
                logger.warning("webhook outbox full: the end of run %s is not delivered", run_id)
                return
            except Exception as exc:
                delay = self._retry_delay(attempt)
                if time.monotonic() + delay > deadline:
                    self.deliveries.labels(entry.event if entry else "unknown", "dropped").inc()
                    logger.warning("the webhook of run %s could not be queued: %r", run_id, exc)
                    return
                logger.info("the webhook of run %s is not queued yet: %r", run_id, exc)
                await asyncio.sleep(delay)

    async def _run_record(self, ref: ConversationRef, run_id: str) -> dict[str, Any] | None:
        snapshot = await self.backend.snapshot(ref)
        runs = {} if snapshot is None else snapshot.state.get("runs", {})
        record: dict[str, Any] | None = runs.get(run_id)
        return record

    def _retry_delay(self, attempt: int) -> float:
        delay = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return float(delay * (0.75 + random.random() / 4))

    # --- delivery ------------------------------------------------------------------------
    async def _work(self) -> None:
        while True:
            entry = await self.outbox.take()
            try:
                await self._deliver(entry)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("webhook %s could not be handled", entry.delivery_id)

    async def _deliver(self, entry: OutboxEntry) -> None:
        if await self._attempt(entry):
            self.deliveries.labels(entry.event, "delivered").inc()
            await self.outbox.done(entry)
            return
        self.attempt_failures.labels(entry.event).inc()
        elapsed = time.time() - entry.created
        left = self.give_up_seconds - elapsed
        if left <= 0:
            self.deliveries.labels(entry.event, "failed").inc()
            logger.warning(
                "webhook %s (%s of run %s) given up: undelivered %.0f s after the run ended",
                entry.delivery_id,
                entry.event,
                entry.run_id,
                elapsed,
            )
            await self.outbox.done(entry)
            return
        await self.outbox.later(entry, min(self._backoff(elapsed), left))

    def _backoff(self, elapsed: float) -> float:
        """About the time since the run ended, so attempts double (0, 0.5, 1, 2, 4 … s with
        the defaults, at most a minute apart) on whichever instance holds the entry."""
        delay = min(self.max_backoff_seconds, max(self.backoff_seconds, elapsed))
        return float(delay * (0.75 + random.random() / 4))

    async def _attempt(self, entry: OutboxEntry) -> bool:
        assert self._client is not None
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign_payload(self.secret, int(time.time()), entry.body),
            DELIVERY_HEADER: entry.delivery_id,
            EVENT_HEADER: entry.event,
            "User-Agent": "agent-event-gateway",
        }
        try:
            response = await self._client.post(self.url, content=entry.body, headers=headers)
        except httpx.HTTPError as exc:
            logger.info("webhook %s attempt failed: %s", entry.delivery_id, type(exc).__name__)
            return False
        if 200 <= response.status_code < 300:
            return True
        logger.info("webhook %s attempt answered %d", entry.delivery_id, response.status_code)
        return False
