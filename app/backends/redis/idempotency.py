"""Idempotency records on Redis: one key per scope, written once (``SET NX``) with a TTL."""

from __future__ import annotations

import orjson

from app.backends.redis.errors import unavailable
from app.backends.redis.instance import RedisInstance
from app.backends.redis.keys import idempotency_key
from app.backends.roles import IdempotencyStore
from app.backends.types import IdempotencyRecord

__all__ = ["RedisIdempotency"]


class RedisIdempotency(IdempotencyStore):
    def __init__(self, instance: RedisInstance) -> None:
        self._i = instance

    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        with unavailable():
            raw = await self._i.redis.get(idempotency_key(scope, self._i.prefix))
        if raw is None:
            return None
        data = orjson.loads(raw)
        return IdempotencyRecord(data["fingerprint"], data["status"], data["body"])

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        body = orjson.dumps(
            {"fingerprint": record.fingerprint, "status": record.status, "body": record.body}
        )
        with unavailable():
            stored = await self._i.redis.set(
                idempotency_key(scope, self._i.prefix), body, nx=True, px=max(1, int(ttl * 1000))
            )
        return bool(stored)

    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        with unavailable():
            return bool(
                await self._i.redis.pexpire(
                    idempotency_key(scope, self._i.prefix), max(1, int(ttl * 1000))
                )
            )
