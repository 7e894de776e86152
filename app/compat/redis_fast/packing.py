"""Commands are packed by hiredis (C), not by redis-py's asyncio connection (Python).

redis-py's asyncio ``pack_command`` joins each argument onto a growing buffer in Python: for an
append of 64 events (4 arguments each) that was a large share of the gateway's CPU on a Redis stream
(BENCHMARKS.md, "Costs behind the code's shortcuts"). Its synchronous client already packs with
hiredis when it is installed; this gives the asyncio connections of our pool the same, byte for
byte: the command name split as redis-py splits it, numbers and views through the connection's own
encoder, and str and bytes handed to hiredis as they are while that encoder is strict UTF-8 (the
default), which is how hiredis encodes str too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis
from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection

__all__ = ["pack_plain_commands", "pack_with_hiredis", "plain_utf8"]

#: hiredis's stub types the argument as a 1-tuple and leaves the result untyped.
_pack_command = cast(Callable[[tuple[bytes | str | int, ...]], bytes], hiredis.pack_command)
_UTF8 = frozenset({"utf-8", "utf8"})
#: The encoder's (untyped) ``encode``, as cast once here: a ``Callable[...]`` written in the
#: ``cast`` is built at every call, once per command.
_Encode = Callable[[Any], bytes | memoryview]


class _HiredisPacking(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        # As redis-py: a command given as "CONFIG GET" is sent as two arguments.
        if isinstance(args[0], str):
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        encoder = self.encoder
        encode = cast(_Encode, encoder.encode)  # untyped upstream
        if encoder.encoding.lower() in _UTF8 and encoder.encoding_errors == "strict":
            # bytes and str go to hiredis as they are (it encodes str as strict UTF-8, as the
            # encoder would); anything else (numbers, memoryviews) through the encoder.
            packed = tuple(
                arg if type(arg) is bytes or type(arg) is str else bytes(encode(arg))
                for arg in args
            )
        else:
            packed = tuple(bytes(encode(arg)) for arg in args)
        return [_pack_command(packed)]


def pack_with_hiredis(pool: ConnectionPool) -> None:
    """Make the connections ``pool`` creates from now on pack with hiredis (its connection
    class, chosen by the URL's scheme, is kept as the base)."""
    base = pool.connection_class
    if issubclass(base, _HiredisPacking):
        return
    name = f"Hiredis{base.__name__}"
    pool.connection_class = cast(type[AbstractConnection], type(name, (_HiredisPacking, base), {}))


def pack_plain_commands(
    conn: AbstractConnection, commands: Sequence[tuple[str | bytes | int, ...]]
) -> list[bytes]:
    """``conn.pack_commands(commands)`` for commands whose arguments are all ``str``, ``bytes`` or
    ``int``: one hiredis call per command, no per-argument Python (an append's twenty-odd arguments
    at a fraction of the cost (BENCHMARKS.md, "Costs behind the code's shortcuts")). hiredis writes
    an int as its decimal digits, as the encoder does; under an encoder that is not strict UTF-8
    this is the connection's own."""
    if plain_utf8(conn):
        return [b"".join([_pack_command(command) for command in commands])]
    return conn.pack_commands(commands)


def plain_utf8(conn: AbstractConnection) -> bool:
    """Whether ``conn``'s encoder writes str as strict UTF-8 (as hiredis does, and
    ``str.encode``), so its commands may be packed without it."""
    encoder = conn.encoder
    return encoder.encoding.lower() in _UTF8 and encoder.encoding_errors == "strict"
