"""Conversations on Redis: create, metadata, delete, and the per-principal index for listing."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson
from redis.exceptions import NoScriptError, RedisError

from app.backends.redis.errors import unavailable
from app.backends.redis.instance import RedisInstance, text
from app.backends.redis.keys import principal_index_key, ref_value
from app.backends.redis.limits import (
    RESERVE_CONVERSATION,
    RESERVED_PREFIX,
    RedisLimits,
    reservation_fresh,
)
from app.backends.redis.role import RedisRole
from app.backends.redis.script_batch import ScriptCall, evalsha_in, settle
from app.backends.redis.scripts import CREATE, RESTORE, SAVE_META
from app.backends.roles import ConversationStore
from app.backends.types import ConversationMeta, ConversationRef
from app.ids import new_token

__all__ = ["RedisConversations"]


class RedisConversations(RedisRole, ConversationStore):
    def __init__(self, instance: RedisInstance) -> None:
        super().__init__(instance)
        self._create = instance.redis.register_script(CREATE)
        self._restore = instance.redis.register_script(RESTORE)
        self._save_meta = instance.redis.register_script(SAVE_META)
        self._reserve = instance.redis.register_script(RESERVE_CONVERSATION)

    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        """Create it, list it and set its expiry in one round trip. Listed and touched even
        when it was not created here: then it exists, created elsewhere, and is listed and
        touched by its creator too (the same writes, in any order)."""
        i = self._i
        keys = i.keys(ref)
        listed = (principal_index_key(ref.principal, i.prefix), ref.key)
        create: ScriptCall = (
            self._create,
            [keys.meta],
            [new_token(6), orjson.dumps(meta.to_dict()), ref_value(ref)],
        )
        with unavailable():
            async with i.redis.pipeline(transaction=False) as pipe:
                evalsha_in(pipe, create)
                i.touch_in(pipe, keys, listed=listed)
                replies = await pipe.execute(raise_on_error=False)
            for reply in replies[1:]:
                if isinstance(reply, Exception):
                    raise reply
            created = await settle(create, replies[0])
            if created:
                i.note_created(keys.tag)
            if created and isinstance(replies[0], NoScriptError):
                await i.touch(keys, listed=listed)  # created after the pipeline set its expiry
        return bool(created)

    async def restore_conversation(
        self,
        ref: ConversationRef,
        meta: ConversationMeta,
        state: dict[str, Any],
        extensions: dict[str, Any],
    ) -> bool:
        i = self._i
        keys = i.keys(ref)
        args: list[str | bytes] = [new_token(6), orjson.dumps(meta.to_dict())]
        args += [orjson.dumps(state), orjson.dumps(extensions), ref_value(ref)]
        with unavailable():
            restored = await self._restore(
                keys=[keys.meta, keys.log, keys.snap, keys.run], args=args
            )
            if restored:
                i.states.forget(keys.tag)
                await i.redis.hset(principal_index_key(ref.principal, i.prefix), ref.key, 1)
                await i.touch(keys)
        return bool(restored)

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        with unavailable():
            raw = await self._i.redis.hget(self._i.keys(ref).meta, "meta")
        return None if raw is None else ConversationMeta.from_dict(orjson.loads(raw))

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        keys = self._i.keys(ref)
        owned = self._i.owned.get(keys.tag)
        if owned is not None:
            owned.start_meta = None  # the claim's copy is older than this save
        with unavailable():
            while True:
                args: list[Any] = [orjson.dumps(meta.to_dict()), meta.session_id]
                if keep_title:  # saved only under the stored title, which it answers otherwise
                    args.append(orjson.dumps(meta.title))
                res = await self._save_meta(keys=[keys.meta], args=args)
                if not isinstance(res, bytes | str):
                    return  # one round trip while the title did not change (the common case)
                meta.title = orjson.loads(res)  # set meanwhile: saved again, under it

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        index = principal_index_key(ref.principal, self._i.prefix)
        if await self._try_reserve(index, ref, limit):  # listed already, or room for it
            return True
        if await self.get_meta(ref) is not None:  # an existing conversation is always admitted
            return True
        # Full, as far as the index says: it may still list conversations that expired
        # (conversation_ttl_seconds). Listing drops them; only then is "full" the answer. Listing
        # first every time would cost one read per conversation the principal has, per new one.
        await self.list_conversations(ref.principal)
        return await self._try_reserve(index, ref, limit)

    async def _try_reserve(self, index: str, ref: ConversationRef, limit: int) -> bool:
        with unavailable():
            reservation = f"{RESERVED_PREFIX}{int(time.time() * 1000)}"
            res = await self._reserve(keys=[index], args=[ref.key, limit, reservation])
        return bool(int(res))

    def limit_store(self) -> RedisLimits:
        return self._i.limits

    async def delete(self, ref: ConversationRef) -> bool:
        i = self._i
        keys = i.keys(ref)
        with unavailable():
            async with i.redis.pipeline(transaction=False) as pipe:
                pipe.delete(keys.meta)
                # The abort flag stays (it expires by itself): the DELETE's abort of a run owned
                # by another instance must still reach that owner's next poll.
                pipe.delete(*(key for key in keys.all_keys() if key != keys.abort))
                pipe.hdel(principal_index_key(ref.principal, i.prefix), ref.key)
                existed, _, _ = await pipe.execute()
        i.states.forget(keys.tag)
        entry = i.tickets.tickets.get(keys.tag)
        if entry is not None:  # our queued runs of it will not start
            i.dropped.update((keys.tag, run_id) for run_id in entry[1])
            i.tickets.forget(keys)
        owned = i.owned.get(keys.tag)
        if owned is not None:  # its run record is gone: it can no longer append
            owned.fenced = True
        reader = i.hub.readers.get(keys.tag)
        if reader is not None:
            reader.inc, reader.inc_known = None, True
            reader.reset()
        return bool(existed)

    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        i = self._i
        index = principal_index_key(principal, i.prefix)
        with unavailable():
            listed = {text(k): text(v) for k, v in (await i.redis.hgetall(index)).items()}
            names = list(listed)
            if not names:
                return []
            async with i.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hget(i.keys(ConversationRef(principal, name)).meta, "meta")
                metas = await pipe.execute()
        out: list[tuple[str, ConversationMeta]] = []
        stale: list[str] = []
        now_ms = time.time() * 1000
        for name, raw in zip(names, metas, strict=True):
            if raw is None:
                if not reservation_fresh(listed[name], now_ms):  # being created: it counts
                    stale.append(name)  # expired (conversation_ttl_seconds)
            else:
                out.append((name, ConversationMeta.from_dict(orjson.loads(raw))))
        if stale:
            with contextlib.suppress(RedisError, OSError):
                await i.redis.hdel(index, *stale)
        return out
