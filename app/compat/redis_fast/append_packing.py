"""The append script's arguments as RESP, an event's four in three pieces, two of them cached.

An append sends four arguments per event (kind, data, type, run id: ``EventLog._args``), and
three of them repeat from event to event: the kind, the type and the run id. hiredis packs each
argument anew (a length header formatted per argument: the largest Redis-only cost per event
of a fast stream). Here an event is ``kind + data's length header``, ``data``, ``type + run
id``, the first and the last looked up by value: cheaper per event, the same bytes (the
test packs both ways) (BENCHMARKS.md, "Costs behind the code's shortcuts").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["bulk", "pack_append_args", "remember"]

K = TypeVar("K")

#: Cached pieces kept at most (past it a cache starts over): lengths and run ids vary.
CACHE_LIMIT = 4096

_heads: dict[tuple[str, int], bytes] = {}
_tails: dict[tuple[str, str], bytes] = {}
#: The seven header arguments of an append without a snapshot, packed, by their values: the same for
#: every append of a run but for n (a slow stream's append carries one event, and its header was 7
#: of its 13 arguments packed; cached, such an append packs much faster: BENCHMARKS.md, "Costs
#: behind the code's shortcuts").
_headers: dict[tuple[Any, ...], bytes] = {}
#: The last argument (fresh or not), packed.
_flags: dict[Any, bytes] = {}


def bulk(arg: str | bytes | int) -> bytes:
    """One argument as a RESP bulk string, as hiredis writes it (str as strict UTF-8, an int
    as its decimal digits)."""
    if type(arg) is str:
        arg = arg.encode()
    elif type(arg) is int:
        arg = b"%d" % arg
    assert isinstance(arg, bytes)
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def remember(cache: dict[K, bytes], key: K, packed: bytes, limit: int | None = None) -> bytes:
    """Store ``packed`` under ``key`` in ``cache`` and return it; a cache at ``limit`` entries
    (``CACHE_LIMIT`` by default) starts over first. Called on a miss only:
    ``cache.get(key) or remember(cache, key, <packed>)``."""
    if len(cache) >= (CACHE_LIMIT if limit is None else limit):
        cache.clear()
    cache[key] = packed
    return packed


def pack_append_args(args: Sequence[str | bytes | int]) -> list[bytes]:
    """The RESP bulk strings of ``args``, laid out as ``EventLog._args`` lays them out: seven
    header arguments (the seventh the number of events n), 4 x n event arguments (kind, data
    as bytes, type, run id), then the rest (nonce, the writer's last id, flag). Joined, the
    same bytes as one ``bulk`` per argument."""
    n = args[6]
    assert type(n) is int
    end = 7 + 4 * n
    if args[3]:  # a snapshot's state: not worth a cache entry
        out = [bulk(arg) for arg in args[:7]]
    else:
        header = tuple(args[:7])
        out = [_headers.get(header) or remember(_headers, header, b"".join(map(bulk, header)))]
    heads, tails = _heads, _tails
    # Typed loosely: the layout says which is which (a bytes ``data`` is what ``%`` and
    # ``join`` take; anything else fails the call, as hiredis would).
    events: Iterator[Any] = iter(args[7:end])
    for kind, data, type_, run_id in zip(events, events, events, events, strict=True):
        size = len(data)
        head = heads.get((kind, size)) or remember(
            heads, (kind, size), bulk(kind) + b"$%d\r\n" % size
        )
        tail = tails.get((type_, run_id)) or remember(
            tails, (type_, run_id), b"\r\n" + bulk(type_) + bulk(run_id)
        )
        out += (head, data, tail)
    rest = args[end:]
    if len(rest) == 3:  # nonce, the writer's last id, flag
        flag = rest[2]
        out += (
            bulk(rest[0]),
            bulk(rest[1]),
            _flags.get(flag) or remember(_flags, flag, bulk(flag)),
        )
    else:
        out += [bulk(arg) for arg in rest]
    return out
