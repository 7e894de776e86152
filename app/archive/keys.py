"""The keys the archive holds, per principal, in memory: a conversation that is not among them
is not archived, so the first run of a brand-new conversation (and a read of an unknown key)
costs no database read.

Exact only when this instance is the archive's one writer of its conversations, that is when
its live backend is its own (memory; ``Backend.limit_store() is None``): a principal's keys are
loaded once (one query of keys) and then kept by this instance's writes, each added once it is
committed. A commit before the load's query is in its answer; one after it is added to the
entry, which exists from before the query; so no archived key is ever missing. Deletes and
retention leave their keys in (a key too many only costs the exact lookup). With a shared live
backend (Redis) other instances write too, and this index is not used.

Bounded: a principal with more than ``MAX_KEYS_PER_PRINCIPAL`` keys is always looked up, and
the least recently used principals are dropped beyond ``MAX_KEYS`` keys (loaded again when next
asked). A load that fails or is still running answers "maybe": the exact lookup decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from app.archive.writer import describe_error
from app.backends import ConversationRef

__all__ = ["MAX_KEYS", "MAX_KEYS_PER_PRINCIPAL", "ArchivedKeys"]

logger = logging.getLogger("app.archive")
#: Bounds of the keys held in memory, all of them and one principal's: what they hold at
#: most is in (BENCHMARKS.md, "Costs behind the code's shortcuts").
MAX_KEYS = 200_000
MAX_KEYS_PER_PRINCIPAL = 50_000

#: Reads the principal's archived keys, at most ``limit`` of them.
LoadKeys = Callable[[str, int], Awaitable[list[str]]]


class _Entry:
    __slots__ = ("keys", "load", "loaded")

    def __init__(self) -> None:
        #: The principal's archived keys; None when there are too many to keep.
        self.keys: set[str] | None = set()
        self.loaded = False
        self.load: asyncio.Task[None] | None = None

    @property
    def size(self) -> int:
        return 1 if self.keys is None else len(self.keys)

    def add(self, keys: Iterable[str], limit: int) -> None:
        if self.keys is not None:
            self.keys.update(keys)
            if len(self.keys) > limit:
                self.keys = None


class ArchivedKeys:
    def __init__(
        self,
        load_keys: LoadKeys,
        *,
        max_keys: int = MAX_KEYS,
        max_per_principal: int = MAX_KEYS_PER_PRINCIPAL,
    ) -> None:
        self._load_keys = load_keys
        self._max_keys = max_keys
        self._max_per_principal = max_per_principal
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._size = 0  # keys held by loaded entries

    def may_hold(self, ref: ConversationRef) -> bool:
        """False only when the archive certainly does not hold ``ref`` (no I/O: a principal not
        loaded yet starts its load and answers True meanwhile)."""
        entry = self._entries.get(ref.principal)
        if entry is None:
            entry = self._entries[ref.principal] = _Entry()
            entry.load = asyncio.create_task(self._load(ref.principal, entry))
            return True
        self._entries.move_to_end(ref.principal)
        if not entry.loaded or entry.keys is None:
            return True
        return ref.key in entry.keys

    def written(self, ref: ConversationRef) -> None:
        """``ref`` was committed to the archive by this instance."""
        entry = self._entries.get(ref.principal)
        if entry is None or entry.keys is None or ref.key in entry.keys:
            return  # not asked about yet: its load will read it
        before = entry.size
        entry.add((ref.key,), self._max_per_principal)
        if entry.loaded:
            self._size += entry.size - before
            self._evict()

    async def close(self) -> None:
        for entry in self._entries.values():
            if entry.load is not None and not entry.load.done():
                entry.load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await entry.load
        self._entries.clear()
        self._size = 0

    async def _load(self, principal: str, entry: _Entry) -> None:
        try:
            keys = await self._load_keys(principal, self._max_per_principal + 1)
        except Exception as exc:
            logger.warning("archive: reading a principal's keys failed: %s", describe_error(exc))
            if self._entries.get(principal) is entry:
                del self._entries[principal]  # asked again: loaded again
            return
        entry.add(keys, self._max_per_principal)
        entry.loaded = True
        self._size += entry.size
        self._evict()

    def _evict(self) -> None:
        """Drop the least recently used loaded principals while over ``max_keys``."""
        for principal in list(self._entries):
            if self._size <= self._max_keys:
                return
            entry = self._entries[principal]
            if entry.loaded:  # one still loading must keep every commit made meanwhile
                del self._entries[principal]
                self._size -= entry.size
