"""Idempotency records on Redis: one key per scope, written once (``SET NX``) with a TTL.

The answer of a run accepted under an ``Idempotency-Key`` is also kept with its conversation
(``P:{T}:idem:S``), written by the very script that accepts the run (:func:`remembered` gives
that script its key and value), so it exists as soon as the run does.
"""

from __future__ import annotations

import orjson

from app.backends.redis.errors import unavailable
from app.backends.redis.keys import ConversationKeys, idempotency_key
from app.backends.redis.queue import Remembered
from app.backends.redis.role import RedisRole
from app.backends.roles import IdempotencyStore
from app.backends.types import AcceptedAnswer, ConversationRef, IdempotencyRecord

__all__ = ["RedisIdempotency", "remembered"]


def _encode(record: IdempotencyRecord) -> bytes:
    return orjson.dumps(
        {"fingerprint": record.fingerprint, "status": record.status, "body": record.body}
    )


def _decode(raw: bytes | str | None) -> IdempotencyRecord | None:
    if raw is None:
        return None
    data = orjson.loads(raw)
    return IdempotencyRecord(data["fingerprint"], data["status"], data["body"])


def _ttl_ms(ttl: float) -> int:
    return max(1, int(ttl * 1000))


def remembered(keys: ConversationKeys, answer: AcceptedAnswer | None) -> Remembered | None:
    """What the script accepting a run stores along with it (None: no answer to keep)."""
    if answer is None:
        return None
    return keys.accepted(answer.scope), _encode(answer.record), _ttl_ms(answer.ttl)


class RedisIdempotency(RedisRole, IdempotencyStore):
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        with unavailable():
            raw = await self._i.redis.get(idempotency_key(scope, self._i.prefix))
        return _decode(raw)

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        key = idempotency_key(scope, self._i.prefix)
        with unavailable():
            stored = await self._i.redis.set(key, _encode(record), nx=True, px=_ttl_ms(ttl))
        return bool(stored)

    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        with unavailable():
            return bool(
                await self._i.redis.pexpire(idempotency_key(scope, self._i.prefix), _ttl_ms(ttl))
            )

    async def accepted_answer(self, ref: ConversationRef, scope: str) -> IdempotencyRecord | None:
        with unavailable():
            raw = await self._i.redis.get(self._i.keys(ref).accepted(scope))
        return _decode(raw)
