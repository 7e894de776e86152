"""Commands packed by hiredis go out byte for byte as redis-py's own packer sends them, and the
gateway's client speaks to a real Redis with them."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from redis.asyncio.connection import Connection, UnixDomainSocketConnection

from app.backends.redis import redis_client
from app.compat.redis_fast.packing import pack_plain_commands, pack_with_hiredis
from tests.app.support.redis_support import SHARED_REDIS_URL

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("CONFIG GET", "maxmemory"),  # a command name with a space is split, as redis-py does
    (b"CLIENT SETNAME", b"x"),
    ("EVALSHA", "f" * 40, 2, "k1", "k2", "token", 0, 3.25, -7, "", b""),
    ("XADD", "s", "*", "d", b"\x00\xff binary \r\n", "t", "message.delta", "u", "é 字 🙂"),
    ("SET", "big", b"v" * 70_000),  # beyond redis-py's 6,000-byte chunking
    ("SET", "view", memoryview(b"from a memoryview")),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0])[:14])
def test_the_packed_bytes_are_redis_pys_own(command: tuple[Any, ...]) -> None:
    plain = Connection()
    pool_class = type("Pool", (), {"connection_class": Connection})()
    pack_with_hiredis(pool_class)
    hiredis = pool_class.connection_class()
    assert hiredis.pack_command is not plain.pack_command
    assert b"".join(hiredis.pack_command(*command)) == b"".join(plain.pack_command(*command))
    pipelined = [command, ("PING",), command]
    assert b"".join(hiredis.pack_commands(pipelined)) == b"".join(plain.pack_commands(pipelined))


PLAIN: list[tuple[str | bytes | int, ...]] = [
    ("EVALSHA", "f" * 40, 2, "k1", "k2", "token", 0, -7, 10**20, "", b""),
    ("EVALSHA", "f" * 40, 1, "k", "é 字 🙂", b"\x00\xff binary \r\n", "v" * 70_000),
]


def test_plain_commands_packed_at_once_are_the_connections_own_bytes() -> None:
    plain = Connection()
    for commands in ([PLAIN[0]], PLAIN):
        got = b"".join(pack_plain_commands(plain, commands))
        assert got == b"".join(plain.pack_commands(commands))
    # An encoder that is not strict UTF-8: the connection packs (hiredis would not match).
    latin = Connection(encoding="latin-1")
    command = ("EVALSHA", "f" * 40, 1, "k", "é")
    assert pack_plain_commands(latin, [command]) == latin.pack_commands([command])
    assert b"\xe9" in b"".join(pack_plain_commands(latin, [command]))


def test_the_scheme_picks_the_base_class_and_packing_is_added_once() -> None:
    pool = type("Pool", (), {"connection_class": UnixDomainSocketConnection})()
    pack_with_hiredis(pool)
    packing = pool.connection_class
    assert issubclass(packing, UnixDomainSocketConnection)
    pack_with_hiredis(pool)
    assert pool.connection_class is packing


async def test_the_gateways_client_talks_to_redis_with_it() -> None:
    client = redis_client(SHARED_REDIS_URL)
    key = f"agw-test-packing:{secrets.token_hex(4)}"
    value = "é 字 🙂".encode() + b"\x00\xff" * 5_000
    try:
        assert "Hiredis" in client.connection_pool.connection_class.__name__
        script = client.register_script("redis.call('SET', KEYS[1], ARGV[1]) return ARGV[2]")
        assert await script(keys=[key], args=[value, 42]) == b"42"
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.strlen(key)
            got, length = await pipe.execute()
        assert (got, length) == (value, len(value))
        assert await client.config_get("maxmemory") is not None
    finally:
        await client.delete(key)
        await client.aclose()
