"""Completion webhooks (``[webhooks] url, secret, events``): a signed POST when a run ends.

:class:`WebhookDispatcher` (:mod:`.dispatcher`) enqueues run ends into an outbox and delivers
them at least once; :mod:`.payload` computes a delivery once per run end; :mod:`.signing` signs
and verifies; :mod:`.memory_outbox` is the in-process outbox (the Redis one is
``app/backends/redis/webhook_outbox.py``).
"""

from app.observability.webhooks.dispatcher import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    WebhookDispatcher,
)
from app.observability.webhooks.memory_outbox import MemoryOutbox
from app.observability.webhooks.payload import WEBHOOK_EVENTS, delivery_id, webhook_entry
from app.observability.webhooks.signing import sign_payload, verify_signature

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "WEBHOOK_EVENTS",
    "MemoryOutbox",
    "WebhookDispatcher",
    "delivery_id",
    "sign_payload",
    "verify_signature",
    "webhook_entry",
]
