"""Completion webhooks (``[webhooks] url, secret, events``): a POST when a run ends.

The owner of a run hands its end to :meth:`WebhookDispatcher.run_ended` (a non-blocking
enqueue); background workers read the run's record, POST it to ``url`` and retry failures with
exponential backoff (bounded attempts). Delivery is at least once: a receiver answering 2xx
acknowledges; every retry carries the same ``X-Gateway-Delivery`` id for de-duplication.

Signature: ``X-Gateway-Signature: t=<unix seconds>,v1=<hex>`` where ``v1`` is
HMAC-SHA256(secret, ``"<t>." + body``); :func:`verify_signature` checks one (with a tolerance
on ``t`` against replays). Outcomes are counted in ``agent_gateway_webhook_deliveries_total``
and failed attempts in ``agent_gateway_webhook_attempt_failures_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import random
import time
import uuid
from dataclasses import dataclass

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter

from app.backends import Backend, ConversationRef
from app.config import WebhooksSection
from core.runs import RUN_TERMINAL_TYPE_LIST

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "WEBHOOK_EVENTS",
    "WebhookDispatcher",
    "sign_payload",
    "verify_signature",
]

logger = logging.getLogger("app.webhooks")
SIGNATURE_HEADER = "X-Gateway-Signature"
DELIVERY_HEADER = "X-Gateway-Delivery"
EVENT_HEADER = "X-Gateway-Event"
#: Run status -> webhook event type.
WEBHOOK_EVENTS = {event.removeprefix("run."): event for event in RUN_TERMINAL_TYPE_LIST}
_RECORD_FIELDS = ("sessionId", "status", "usage", "error", "reason", "createdAt", "updatedAt")


def sign_payload(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Gateway-Signature`` value for ``body`` sent at ``timestamp`` (unix seconds)."""
    mac = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify_signature(
    secret: str, header: str, body: bytes, *, tolerance: float = 300, now: float | None = None
) -> bool:
    """True when ``header`` signs ``body`` with ``secret`` and its timestamp is recent."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    stamp = parts.get("t", "")
    if not stamp.isdigit() or "v1" not in parts:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        return False
    expected = sign_payload(secret, int(stamp), body).rsplit("v1=", 1)[1]
    return hmac.compare_digest(expected, parts["v1"])


@dataclass(frozen=True, slots=True)
class _Ended:
    ref: ConversationRef
    run_id: str


class WebhookDispatcher:
    """Queues run ends and delivers their webhooks in the background."""

    def __init__(
        self,
        config: WebhooksSection,
        backend: Backend,
        registry: CollectorRegistry | None = None,
        *,
        max_attempts: int = 6,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 60.0,
        timeout_seconds: float = 10.0,
        queue_max: int = 10000,
        workers: int = 4,
    ) -> None:
        self.url = config.url
        self.secret = config.secret
        self.events = frozenset(config.events)
        self.backend = backend
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.timeout_seconds = timeout_seconds
        self.worker_count = workers
        self._queue: asyncio.Queue[_Ended] = asyncio.Queue(queue_max)
        self._workers: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None
        registry = registry if registry is not None else CollectorRegistry()
        self.deliveries = Counter(
            "agent_gateway_webhook_deliveries",
            "Webhook deliveries by outcome (delivered, failed after every attempt, dropped).",
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

    def start(self) -> None:
        if not self.enabled or self._workers:
            return
        self._client = httpx.AsyncClient(timeout=self.timeout_seconds, follow_redirects=False)
        self._workers = [
            asyncio.create_task(self._work(), name=f"webhooks-{i}")
            for i in range(self.worker_count)
        ]

    def run_ended(self, ref: ConversationRef, run_id: str) -> None:
        """A run owned here ended (never blocks: the delivery happens in the background)."""
        if not self._workers:
            return
        try:
            self._queue.put_nowait(_Ended(ref, run_id))
        except asyncio.QueueFull:
            self.deliveries.labels("unknown", "dropped").inc()
            logger.warning("webhook queue full: the end of run %s is not delivered", run_id)

    async def close(self, grace: float = 5.0) -> None:
        """Deliver what is queued for up to ``grace`` s, then stop."""
        if not self._workers:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- delivery ------------------------------------------------------------------------
    async def _work(self) -> None:
        while True:
            ended = await self._queue.get()
            try:
                await self._deliver_end(ended)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.deliveries.labels("unknown", "failed").inc()
                logger.exception("webhook for run %s could not be prepared", ended.run_id)
            finally:
                self._queue.task_done()

    async def _payload(self, ended: _Ended) -> tuple[str, bytes] | None:
        snapshot = await self.backend.snapshot(ended.ref)
        run = None if snapshot is None else snapshot.state.get("runs", {}).get(ended.run_id)
        event = WEBHOOK_EVENTS.get(run.get("status", "")) if run else None
        if run is None or event is None or event not in self.events:
            return None
        body = {
            "id": f"whd_{uuid.uuid4().hex}",
            "type": event,
            "timestamp": time.time() * 1000,
            "principal": ended.ref.principal,
            "conversationKey": ended.ref.key,
            "run": {"runId": ended.run_id} | {k: run[k] for k in _RECORD_FIELDS if k in run},
        }
        return event, orjson.dumps(body)

    async def _prepare(self, ended: _Ended) -> tuple[str, bytes] | None:
        """The payload; reading the run is retried like a delivery (the backend may be down)."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return await self._payload(ended)
            except Exception as exc:
                if attempt == self.max_attempts:
                    raise
                logger.info("run %s not readable for its webhook: %r", ended.run_id, exc)
                await asyncio.sleep(self._backoff(attempt))
        return None

    async def _deliver_end(self, ended: _Ended) -> None:
        prepared = await self._prepare(ended)
        if prepared is None:
            return
        event, body = prepared
        delivery = orjson.loads(body)["id"]
        for attempt in range(1, self.max_attempts + 1):
            if await self._attempt(event, delivery, body):
                self.deliveries.labels(event, "delivered").inc()
                return
            self.attempt_failures.labels(event).inc()
            if attempt < self.max_attempts:
                await asyncio.sleep(self._backoff(attempt))
        self.deliveries.labels(event, "failed").inc()
        logger.warning(
            "webhook %s (%s of run %s) failed after %d attempts",
            delivery,
            event,
            ended.run_id,
            self.max_attempts,
        )

    def _backoff(self, attempt: int) -> float:
        delay = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return float(delay * (0.75 + random.random() / 4))

    async def _attempt(self, event: str, delivery: str, body: bytes) -> bool:
        assert self._client is not None
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign_payload(self.secret, int(time.time()), body),
            DELIVERY_HEADER: delivery,
            EVENT_HEADER: event,
            "User-Agent": "agent-event-gateway",
        }
        try:
            response = await self._client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            logger.info("webhook %s attempt failed: %s", delivery, type(exc).__name__)
            return False
        if 200 <= response.status_code < 300:
            return True
        logger.info("webhook %s attempt answered %d", delivery, response.status_code)
        return False
