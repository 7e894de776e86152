"""An append packed from cached pieces is, byte for byte, what hiredis packs, and Redis stores
what was appended."""

from __future__ import annotations

import itertools
from typing import Any, cast

import hiredis
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    EventLog,
    Pending,
    SnapshotWrite,
)
from app.backends.redis.keys import ConversationKeys
from app.compat.redis_fast import append_packing
from app.compat.redis_fast.append_packing import bulk, pack_append_args
from app.compat.redis_fast.script_pipeline import ScriptPipeline
from tests.app.support.redis_support import prefix, redis

__all__ = ["prefix", "redis"]  # fixtures

text = st.text(max_size=12)  # any code point but lone surrogates (strict UTF-8, as hiredis)
pendings = st.lists(
    st.builds(
        Pending,
        st.sampled_from([KIND_EVENT, KIND_EXTENSION]),
        st.binary(max_size=40),
        st.sampled_from(["TEXT_MESSAGE_CONTENT", "RUN_FINISHED", "", "é 字"]) | text,
        st.sampled_from(["run_1", "run_2", ""]) | text,
    ),
    max_size=12,
)


def append_args(
    items: list[Pending],
    snapshot: bytes,
    nonce: str,
    fresh: bool,
    header: tuple[str, str, str, bytes] = ("tok|1", "~10001", "0", b"{}"),
    prev: str = "1700000000000-3",
) -> list[str | bytes | int]:
    """As ``EventLog._args`` lays them out (``header``: token, maxlen, release, extensions;
    ``prev``: the writer's last id)."""
    token, maxlen, release, ext = header
    args: list[str | bytes | int] = [token, maxlen, release, snapshot, ext, "0-0", len(items)]
    args += itertools.chain.from_iterable(items)
    args += [nonce, prev, "1" if fresh else "0"]
    return args


def hiredis_args(args: list[Any]) -> bytes:
    """hiredis's packing of ``args`` alone: its command minus the ``*N`` line."""
    packed: bytes = hiredis.pack_command(tuple(args))
    return packed[packed.index(b"\r\n") + 2 :]


headers = st.tuples(
    st.sampled_from(["tok|1", "2|A|r_1"]) | text,
    st.sampled_from(["~10001", "=11"]),
    st.sampled_from(["0", "1"]),
    st.sampled_from([b"", b"{}"]),
)


@settings(deadline=None, max_examples=150)
@given(pendings, st.binary(max_size=30) | st.just(b""), text, st.booleans(), headers)
def test_packed_from_pieces_is_what_hiredis_packs(
    items: list[Pending],
    snapshot: bytes,
    nonce: str,
    fresh: bool,
    header: tuple[str, str, str, bytes],
) -> None:
    """Cached headers too (no snapshot: seven arguments in one piece, by their values)."""
    args = append_args(items, snapshot, nonce, fresh, header)
    got = b"".join(pack_append_args(args))
    assert got == hiredis_args(args)
    assert got == b"".join(map(bulk, args))


def test_pieces_cached_for_one_event_are_not_reused_for_another(monkeypatch: Any) -> None:
    monkeypatch.setattr(append_packing, "CACHE_LIMIT", 3)
    # Empty caches: what earlier tests in this worker cached would be hit, never filled.
    monkeypatch.setattr(append_packing, "_heads", {})
    monkeypatch.setattr(append_packing, "_tails", {})
    monkeypatch.setattr(append_packing, "_headers", {})
    monkeypatch.setattr(append_packing, "_flags", {})
    for round_ in range(3):  # the caches fill, start over, and are hit
        items = [
            Pending(KIND_EVENT, b"x" * size, type_, run)
            for size in (1, 2, 10, 1)
            for type_, run in (("A", "r1"), ("A", "r2"), ("B", "r1"), ("é", "字"))
        ]
        items.append(Pending(KIND_EXTENSION, b"x"))
        for token in ("t1", "t2", "t3", "t4", "t1"):
            for count in (len(items), 1):  # another n: another header
                header = (token, "=11", str(round_ % 2), b"")
                prev = "" if round_ == 1 else f"{round_}-{count}"
                args = append_args(items[:count], b"", f"nonce{round_}", round_ == 0, header, prev)
                assert b"".join(pack_append_args(args)) == hiredis_args(args)
        assert len(append_packing._heads) <= 3 and len(append_packing._tails) <= 3
        assert 0 < len(append_packing._headers) <= 3 and 0 < len(append_packing._flags) <= 2


class _Script:
    sha = "f" * 40


async def test_the_pipeline_packs_calls_as_hiredis_would_and_falls_back_for_other_encoders() -> (
    None
):
    calls_args = [
        append_args([Pending(KIND_EVENT, b'{"a":1}', "T", "r")], b"", "n1", True),
        append_args([Pending(KIND_EXTENSION, "é".encode(), "", "")] * 2, b"snap", "", False),
    ]
    keys = ("k1", "k2", "é")  # latin-1 writes it otherwise than UTF-8
    commands = [("EVALSHA", _Script.sha, len(keys), *keys, *args) for args in calls_args]
    pipeline = ScriptPipeline(Redis(), cast(Any, _Script()), pack_args=pack_append_args)
    calls = [pipeline.call(keys, args) for args in calls_args]
    try:

        def packed(conn: Connection) -> bytes:
            pipeline._conn = conn
            return b"".join(pipeline._packed(pipeline._pending, again=False))

        plain = Connection()
        # hiredis's stub types the command as a one-item tuple
        expected = b"".join(
            hiredis.pack_command(command)  # type: ignore[arg-type]
            for command in commands
        )
        assert packed(plain) == expected
        assert packed(plain) == expected  # from the cached call heads
        latin = Connection(encoding="latin-1")  # not strict UTF-8: redis-py packs it
        assert packed(latin) == b"".join(latin.pack_commands(commands)) != expected
    finally:
        for call in calls:
            call.cancel()


async def test_an_append_packed_from_pieces_is_stored_as_appended(
    redis: Redis, prefix: str
) -> None:
    log = EventLog(redis, max_len=1000)
    keys = ConversationKeys.for_conversation("alice", "packing", prefix=prefix)
    events = [
        Pending(KIND_EVENT, orjson.dumps({"n": n, "t": "é 字 🙂"}), "TEXT_MESSAGE_CONTENT", r)
        for n, r in enumerate(["run_é", "run_é", "run_2"])
    ]
    events.append(Pending(KIND_EXTENSION, b"\x00\xff\r\n binary"))
    ids = await log.append(keys, "", events, snapshot=SnapshotWrite(b'{"s":1}', b"{}"))
    more = await log.append(keys, "", events[:1])
    entries = await log.read_after(keys, "0-0")
    assert entries is not None
    assert [e.id for e in entries] == ids + more
    stored = [(e.kind, e.data, e.type, e.run_id) for e in entries]
    assert stored == [tuple(p) for p in [*events, events[0]]]
    assert await redis.hget(keys.snap, "state") == b'{"s":1}'
    cursor = await redis.hget(keys.snap, "cursor")
    assert isinstance(cursor, bytes) and cursor.decode() == ids[-1]
    # No entries, a snapshot (a run's end): nothing is appended, the snapshot is stored.
    assert await log.append(keys, "", [], snapshot=SnapshotWrite(b'{"s":2}', b"{}", ids[0])) == []
    assert await redis.xlen(keys.log) == len(entries)
    assert await redis.hmget(keys.snap, "state", "cursor") == [b'{"s":2}', ids[0].encode()]
