"""Snapshots on Redis: the owner's live state when it is exact, else snapshot + log tail.

The first snapshot after a claim (the run's start reads one) is answered without a round trip
when the owner's state is exact (no append in flight): the claim read the meta along with the
snapshot. A save of the meta here drops that copy; one saved by another instance in the
milliseconds between the claim and that snapshot is seen by the next snapshot, as if that
save had come just after it.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.backends.redis.claims import Token
from app.backends.redis.cursors import make_cursor
from app.backends.redis.errors import unavailable
from app.backends.redis.instance import text
from app.backends.redis.role import RedisRole
from app.backends.redis.state import ConversationState
from app.backends.roles import Snapshots
from app.backends.types import ConversationMeta, ConversationRef, Snapshot

__all__ = ["RedisSnapshots"]


class RedisSnapshots(RedisRole, Snapshots):
    async def run_issues(self, ref: ConversationRef, run_id: str) -> list[dict[str, Any]]:
        """The owner of a run answers from its live state (no round trip, no snapshot built:
        asked once at every run's end); anyone else reads a snapshot."""
        owned = self._i.owned.get(self._i.keys(ref).tag)
        if owned is None or owned.fenced or owned.dirty or owned.released or owned.appending:
            return await super().run_issues(ref, run_id)
        return [dict(issue) for issue in owned.state.store.issues() if issue["runId"] == run_id]

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        i = self._i
        keys = i.keys(ref)
        owned = i.owned.get(keys.tag)
        if owned is not None and owned.start_meta is not None:
            raw, owned.start_meta = owned.start_meta, None
            if not (owned.fenced or owned.dirty or owned.released or owned.appending):
                return _snapshot(owned.state, ConversationMeta.from_dict(orjson.loads(raw)))
        with unavailable():
            async with i.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(keys.meta, "inc", "meta")
                pipe.get(keys.run)
                pipe.exists(keys.lease)
                (inc, raw_meta), run, alive = await pipe.execute()
            if inc is None or raw_meta is None:
                return None
            meta = ConversationMeta.from_dict(orjson.loads(raw_meta))
            # The owner's live state, unless appends are in flight (it is ahead of its cursor)
            # or the slot is being handed back; else snapshot + log tail, cursor exact.
            stale = owned is None or owned.fenced or owned.dirty or owned.released
            if owned is not None and not stale and not owned.appending:
                state = owned.state
            else:
                if run is not None and not alive:
                    await i.reaper.reap(keys, Token(text(run)))
                async with i.states.lock(keys.tag):
                    state = await i.states.load(keys, text(inc))
        return _snapshot(state, meta)


def _snapshot(state: ConversationState, meta: ConversationMeta) -> Snapshot:
    return Snapshot(
        state=state.store.get_snapshot(),
        cursor=make_cursor(state.inc, state.stream_id),
        extensions=dict(state.extensions),
        meta=meta,
    )
