"""Idempotency of commands: the same command twice yields one effect and the same answer.

The key is the ``Idempotency-Key`` header, else derived from the route, target and body. The
same key with a different route or body is 409 ``idempotency_key_reused``. Only accepted
answers are remembered (a refusal may turn into an acceptance later).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.backends import ConversationRef, IdempotencyRecord
from app.errors import ApiError
from app.gateway import Gateway

__all__ = ["idempotent"]

_locks: dict[str, asyncio.Lock] = {}


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


async def idempotent(
    gateway: Gateway,
    ref: ConversationRef,
    header_key: str | None,
    route: str,
    body: Any,
    produce: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    fingerprint = _digest(route.encode(), canonical)
    key = header_key or fingerprint
    scope = f"{ref.digest}:{_digest(key.encode())}"
    lock = _locks.setdefault(scope, asyncio.Lock())
    try:
        async with lock:
            record = await gateway.backend.idempotency_get(scope)
            if record is not None:
                if record.fingerprint != fingerprint:
                    raise ApiError(
                        409,
                        "idempotency_key_reused",
                        "This Idempotency-Key was used with another request.",
                    )
                return record.body
            answer = await produce()
            ttl = gateway.settings.gateway.idempotency_ttl_seconds
            await gateway.backend.idempotency_put(
                scope, IdempotencyRecord(fingerprint, 202, answer), ttl
            )
            return answer
    finally:
        if not lock.locked():
            _locks.pop(scope, None)
