"""A follower ends by cancellation (its client went away). The cancelled task keeps that error
for as long as the garbage collector leaves it, and a traceback keeps its frames' locals: the
error must hold nothing of the read it cut off, so what the read used (on Redis: the
conversation's log reader and its window) is freed when its owner lets go, not at the next
full collection (~0.1-0.2 s with hundreds of streams)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType

import app.backends
from app.backends import EMPTY_CURSOR, ConversationRef, LogEntry
from app.backends.redis import RedisBackend
from app.streams.follow import Follow, follow_batches
from tests.app.streams.push_support import innermost, read_waits
from tests.app.support.backend_contract import meta
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.support import eventually

REF = ConversationRef("anonymous", "c1")
BACKENDS_DIR = str(Path(app.backends.__file__).parent)


def frames_of(tb: TracebackType | None) -> Iterator[FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def refuse(entries: list[LogEntry]) -> bool:
    return False  # a pushed stream's read, that takes nothing: it waits at the head


async def test_a_cancelled_followers_error_holds_nothing_of_its_read(
    start_gateway: StartGateway,
) -> None:
    gw = await start_gateway(make_settings())
    gateway = gw.gateway
    await gateway.backend.create_conversation(REF, meta())

    async def consume() -> None:
        async for _ in follow_batches(gateway, REF, Follow(start=EMPTY_CURSOR), refuse):
            pass

    backend = innermost(gateway.backend)
    follower = asyncio.create_task(consume())
    await eventually(lambda: bool(read_waits(backend, REF)))
    reader = None
    if isinstance(backend, RedisBackend):
        instance = backend.instance
        reader = weakref.ref(instance.hub.readers[instance.keys(REF).tag])

    gc.disable()  # what follows must be freed by reference counting alone
    try:
        follower.cancel()
        try:
            await follower
        except asyncio.CancelledError as exc:
            error = exc
        # The read's frames (the backends' code) ran to their end: none keeps its locals.
        held = {
            f.f_code.co_qualname: sorted(f.f_locals)
            for f in frames_of(error.__traceback__)
            if f.f_code.co_filename.startswith(BACKENDS_DIR) and f.f_locals
        }
        assert [f.f_code.co_qualname for f in frames_of(error.__traceback__)]  # it has frames
        assert held == {}
        if reader is not None:
            # The reader stops (its linger is over, or the conversation is dropped): with
            # the error still alive, nothing else keeps it and its window.
            await instance.hub.drop(instance.keys(REF))
            assert reader() is None
    finally:
        gc.enable()
