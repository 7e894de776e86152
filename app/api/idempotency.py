"""Idempotency of runs, reloads and commands: a retried request yields one effect, one answer.

The key is the ``Idempotency-Key`` header (scoped to the caller's principal), else derived from
the conversation, route and body, plus what the route adds (a command: the conversation's
incarnation and the run its target belongs to, so a later run reusing a target id is not
answered with an earlier run's answer). The same key with another conversation, route or body is 409
``idempotency_key_reused``. Only accepted answers are remembered (a refusal may turn into an
acceptance later); they are kept ``idempotency_ttl_seconds``.

Across instances (Redis backend) the first request *claims* the key with a set-if-absent record
before it acts; concurrent retries anywhere see the claim and wait for the answer instead of
acting too. A claimer stores the answer (accepted requests only), then marks its claim released
(by its token); a request that finds a released claim and no answer (refused, or the answer
expired) claims the following generation. A live claimer keeps pushing its claim's short expiry
out while it works; a claimer that died with its instance (or whose claim Redis lost) stops doing
so, and its claim expires within ``CLAIM_TTL_SECONDS``, so a retry is answered in seconds.
Everything goes through ``idempotency_get``/``idempotency_put`` (set-if-absent) and
``idempotency_refresh``, which both backends implement atomically.

A request that accepts a run (:func:`idempotent_run`) hands the backend its answer to store in
the very step that accepts the run (the run slot's claim, or the queued run's ticket): if its
instance dies before it stores the answer here, the retry that claims the key next finds that
answer with the conversation (``accepted_answer``) and replays it, instead of starting a
second run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.api.errors import ApiError
from app.backends import Backend, ConversationRef, IdempotencyRecord
from app.backends.types import AcceptedAnswer
from app.gateway import Gateway
from app.runs.manager import AnswerOf

__all__ = ["CLAIM_TTL_SECONDS", "idempotent", "idempotent_run"]

#: How long a claim outlives its claimer's last sign of life (it is refreshed every
#: ``CLAIM_REFRESH_SECONDS`` while the request is processed).
CLAIM_TTL_SECONDS = 5.0
CLAIM_REFRESH_SECONDS = 1.0
_POLL_SECONDS = 0.02
#: Storing the answer of a request whose work is done: retried this long (a Redis blip), then
#: the answer goes out unstored — a 5xx for a run that was accepted would be worse than a retry
#: the record cannot recognise.
STORE_RETRY_SECONDS = 5.0
logger = logging.getLogger(__name__)
_locks: dict[str, asyncio.Lock] = {}
#: The status of every remembered answer (only accepted requests are remembered).
_ACCEPTED = 202
Produce = Callable[[], Awaitable[dict[str, Any]]]
Recall = Callable[[], Awaitable[IdempotencyRecord | None]]


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


def _reused() -> ApiError:
    return ApiError(
        409, "idempotency_key_reused", "This Idempotency-Key was used with another request."
    )


async def idempotent(
    gateway: Gateway,
    ref: ConversationRef,
    header_key: str | None,
    route: str,
    body: Any,
    produce: Produce,
    derived_from: Callable[[], Awaitable[tuple[str, ...]]] | None = None,
) -> dict[str, Any]:
    """``produce()``'s answer, or the answer of the first request with the same key.

    ``derived_from`` adds parts to a derived key (none when the client sent a key)."""
    fingerprint = _fingerprint(ref, route, body)
    if header_key:
        scope = _header_scope(ref, header_key)
    else:
        extra = () if derived_from is None else await derived_from()
        derived = _digest(fingerprint.encode(), *(part.encode() for part in extra))
        scope = f"derived:{ref.digest}:{derived}"
    return await _serialized(gateway, scope, fingerprint, produce, None)


async def idempotent_run(
    gateway: Gateway,
    ref: ConversationRef,
    header_key: str,
    route: str,
    body: Any,
    accept: Callable[[AnswerOf], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``idempotent`` for a request that accepts a run: ``accept(answer_of)`` passes
    ``answer_of`` on to the run manager, whose backend stores the answer with the run in the
    step that accepts it; a retry finds it there when its first request's instance died
    before answering (exactly one run accepted per key)."""
    fingerprint = _fingerprint(ref, route, body)
    scope = _header_scope(ref, header_key)
    ttl = gateway.settings.gateway.idempotency_ttl_seconds
    backend = gateway.backend

    def answer_of(answer: dict[str, Any]) -> AcceptedAnswer:
        return AcceptedAnswer(scope, IdempotencyRecord(fingerprint, _ACCEPTED, answer), ttl)

    async def recall() -> IdempotencyRecord | None:
        return await backend.accepted_answer(ref, scope)

    return await _serialized(gateway, scope, fingerprint, lambda: accept(answer_of), recall)


def _fingerprint(ref: ConversationRef, route: str, body: Any) -> str:
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return _digest(ref.key.encode(), route.encode(), canonical)


def _header_scope(ref: ConversationRef, header_key: str) -> str:
    """A client's key: one per principal, whatever the conversation."""
    return f"key:{_digest(ref.principal.encode())}:{_digest(header_key.encode())}"


async def _serialized(
    gateway: Gateway, scope: str, fingerprint: str, produce: Produce, recall: Recall | None
) -> dict[str, Any]:
    ttl = gateway.settings.gateway.idempotency_ttl_seconds
    lock = _locks.setdefault(scope, asyncio.Lock())
    try:
        async with lock:  # retries on this instance queue here instead of polling
            return await _once(gateway.backend, scope, fingerprint, ttl, produce, recall)
    finally:
        if not lock.locked():
            _locks.pop(scope, None)


async def _once(
    backend: Backend,
    scope: str,
    fingerprint: str,
    ttl: float,
    produce: Produce,
    recall: Recall | None = None,
) -> dict[str, Any]:
    """The first answer under ``scope``; ``produce()`` once this request holds its claim and
    ``recall()`` (the answer an earlier claimer's work left behind) finds none."""
    generation = 0
    while True:
        answer = await backend.idempotency_get(scope)
        if answer is not None:
            if answer.fingerprint != fingerprint:
                raise _reused()
            return answer.body
        claim_scope = f"{scope}:claim:{generation}"
        claim = await backend.idempotency_get(claim_scope)
        if claim is None:
            token = uuid.uuid4().hex
            mine = IdempotencyRecord(fingerprint, 0, {"token": token})
            if not await backend.idempotency_put(claim_scope, mine, CLAIM_TTL_SECONDS):
                continue  # another request claimed it first: look again
            keepalive = asyncio.create_task(_keep_claim(backend, claim_scope))
            try:
                earlier = None if recall is None else await recall()
                if earlier is not None:  # accepted by a claimer that died before answering
                    if earlier.fingerprint != fingerprint:
                        raise _reused()
                    await _store_answer(backend, scope, earlier, ttl)
                    return earlier.body
                result = await produce()
                await _store_answer(
                    backend, scope, IdempotencyRecord(fingerprint, _ACCEPTED, result), ttl
                )
                return result
            finally:  # answered (or refused): the claim no longer holds the key
                keepalive.cancel()
                with contextlib.suppress(Exception):
                    released = IdempotencyRecord(fingerprint, 0, {})
                    await backend.idempotency_put(
                        f"{scope}:released:{token}", released, CLAIM_TTL_SECONDS
                    )
        if claim.fingerprint != fingerprint:
            raise _reused()
        token = str(claim.body.get("token", ""))
        if await backend.idempotency_get(f"{scope}:released:{token}") is not None:
            generation += 1  # refused, or answered and its answer expired: look again
            continue
        await asyncio.sleep(_POLL_SECONDS)  # in progress elsewhere: wait for its answer


async def _store_answer(
    backend: Backend, scope: str, record: IdempotencyRecord, ttl: float
) -> None:
    """Store the answer of work already done; never turn that work into an error."""
    delay = 0.05
    deadline = asyncio.get_running_loop().time() + STORE_RETRY_SECONDS
    while True:
        try:
            await backend.idempotency_put(scope, record, ttl)
            return
        except Exception as exc:
            if asyncio.get_running_loop().time() + delay > deadline:
                logger.warning("idempotency answer not stored (%s): answered unstored", exc)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def _keep_claim(backend: Backend, claim_scope: str) -> None:
    """Refresh the claim's expiry while its request is processed (until cancelled)."""
    while True:
        await asyncio.sleep(CLAIM_REFRESH_SECONDS)
        with contextlib.suppress(Exception):  # Redis away: the claim may lapse, never the request
            await backend.idempotency_refresh(claim_scope, CLAIM_TTL_SECONDS)
