"""Keeping a run's lease alive: the owner renews it every ttl/3 until the run ends.

While Redis is unreachable, renewals are retried quickly until the lease's own deadline; past
it, the owner gives the run up so another instance may take it over (:mod:`.reaper`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from app.backends.redis.claims import Ownership, Token
from app.backends.redis.keys import ConversationKeys
from app.tasks import stop_task

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews a lease every ttl/3 until stopped; sets ``on_lost`` once if it is lost.

    The lease is valid at least until ``deadline()``: the moment the last successful grant
    (claim or renewal) was *sent*, plus the TTL, minus a small margin. While Redis is
    unreachable, renewals are retried quickly until that deadline; past it the owner gives the
    run up (``on_lost``) without renewing, so another instance may take it over.
    """

    def __init__(
        self,
        ownership: Ownership,
        keys: ConversationKeys,
        token: Token,
        on_lost: asyncio.Event,
        granted_at: float | None = None,
    ) -> None:
        self._own = ownership
        self._keys = keys
        self._token = token
        self._lost = on_lost
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        ttl = ownership.lease_ttl_ms / 1000.0
        self._valid_for = ttl - max(0.05, ttl * 0.05)
        self._deadline = (time.monotonic() if granted_at is None else granted_at) + self._valid_for

    def deadline(self) -> float:
        """``time.monotonic()`` until which the lease is surely still ours (if not fenced)."""
        return self._deadline

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"lease-{self._token.run_id}")

    async def _loop(self) -> None:
        interval = self._own.lease_ttl_ms / 3000.0
        retry = min(interval, 0.1)
        wait = interval
        while not self._stopping:
            await asyncio.sleep(min(wait, max(0.0, self._deadline - time.monotonic())))
            sent = time.monotonic()
            if sent >= self._deadline:
                log.warning("run %s: lease expired before it could be renewed", self._token.run_id)
                self._lost.set()
                return
            try:
                # A renewal hanging (Redis unreachable, no reset) is bounded by the deadline.
                renewal = self._own.renew(self._keys, self._token)
                if not await asyncio.wait_for(renewal, max(0.01, self._deadline - sent)):
                    log.warning("run %s lost its lease (fenced)", self._token.run_id)
                    self._lost.set()
                    return
            except Exception as exc:  # Redis down: retry until the lease's own deadline
                log.warning("lease renewal failed for run %s: %s", self._token.run_id, exc)
                wait = retry
                continue
            self._deadline = max(self._deadline, sent + self._valid_for)
            wait = interval
            try:
                await self._own.mark(self._keys)
            except Exception as exc:
                log.warning("lease index update failed for run %s: %s", self._token.run_id, exc)

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        await stop_task(task)
