"""The start-up check of ``app.compat.redis_fast``: each redis-py internal removed in turn (or its
signature replaced), the check logs one warning and the gateway serves runs on redis-py's stock
client; on the memory backend nothing changes.

An attribute that redis-py's own code reads too (``_available_connections``, ``_writer``…) is
removed only while the start-up check runs: in a real upgrade redis-py's code moves with it,
here it would break redis-py itself. A replaced signature is call-compatible with redis-py's
own calls and stays replaced while the gateway serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import hiredis
import pytest
import redis.client
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, Connection

from app.backends.redis import redis_client
from app.compat.redis_fast import check, fast_paths_usable, uses_fast_paths
from app.compat.redis_fast.lean import LeanRedis
from tests.app.support import gateway_server
from tests.app.support.gateway_server import RunningGateway, StartGateway
from tests.app.support.helpers import collect_sse, events_of, terminal
from tests.app.support.redis_support import SHARED_REDIS_URL
from tests.app.support.scripted_provider import ScriptedProvider

Breaker = Callable[[pytest.MonkeyPatch], None]


def _drop_after_init(owner: type, name: str) -> Breaker:
    """Objects of ``owner`` made from now on lack the instance attribute ``name``."""

    def brk(m: pytest.MonkeyPatch) -> None:
        init = owner.__init__  # type: ignore[misc]

        @functools.wraps(init)
        def without(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            with contextlib.suppress(AttributeError):
                delattr(self, name)

        m.setattr(owner, "__init__", without)

    return brk


def _resigned(owner: type, name: str) -> Breaker:
    """``owner.name`` with one more keyword-only parameter: redis-py's calls still work."""

    def brk(m: pytest.MonkeyPatch) -> None:
        method = getattr(owner, name)

        def moved(*args: Any, moved_in_a_later_release: object = None, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        moved.__name__ = name  # no __wrapped__: inspect sees this signature
        m.setattr(owner, name, moved)

    return brk


def _parser_without_reader(m: pytest.MonkeyPatch) -> None:
    init = Connection.__init__

    def without(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._parser = object()  # a parser of another shape

    m.setattr(Connection, "__init__", without)


def _old_hiredis(m: pytest.MonkeyPatch) -> None:
    class Reader:
        def __init__(self, **kwargs: Any) -> None:
            raise TypeError("unexpected keyword argument 'protocolError'")

    m.setattr(hiredis, "Reader", Reader)


#: How each internal of ``check.INTERNALS`` is taken away, and whether that stays while the
#: gateway serves (True) or only while the check runs (False).
BREAKERS: dict[str, tuple[Breaker, bool]] = {
    "ConnectionPool._available_connections (list)": (
        _drop_after_init(BlockingConnectionPool, "_available_connections"),
        False,
    ),
    "ConnectionPool._in_use_connections (set)": (
        _drop_after_init(BlockingConnectionPool, "_in_use_connections"),
        False,
    ),
    "AbstractConnection._writer": (_drop_after_init(Connection, "_writer"), False),
    "AbstractConnection._reader": (_drop_after_init(Connection, "_reader"), False),
    "AbstractConnection._parser._reader, .parse_error": (_parser_without_reader, False),
    "AbstractConnection._resp2_fallback (bool)": (
        _drop_after_init(Connection, "_resp2_fallback"),
        False,
    ),
    "asyncio.StreamReader._buffer (bytearray)": (
        _drop_after_init(asyncio.StreamReader, "_buffer"),
        False,
    ),
    "Pipeline._execute_pipeline(connection, commands, raise_on_error)": (
        _resigned(Pipeline, "_execute_pipeline"),
        True,
    ),
    "Pipeline.raise_first_error(commands, response)": (
        _resigned(Pipeline, "raise_first_error"),
        True,
    ),
    "Pipeline(connection_pool, response_callbacks, transaction, shard_hint)": (
        _resigned(Pipeline, "__init__"),
        True,
    ),
    "Pipeline.command_stack, .scripts, .explicit_transaction, .watching, .connection": (
        _drop_after_init(Pipeline, "explicit_transaction"),
        False,
    ),
    "Redis.parse_response(connection, command_name, **options)": (
        _resigned(Redis, "parse_response"),
        True,
    ),
    "redis.client.EMPTY_RESPONSE, NEVER_DECODE": (
        lambda m: m.delattr(redis.client, "EMPTY_RESPONSE"),
        True,
    ),
    "AbstractConnection.send_packed_command(command, check_health)": (
        _resigned(AbstractConnection, "send_packed_command"),
        True,
    ),
    "AbstractConnection.should_reconnect()": (
        _resigned(AbstractConnection, "should_reconnect"),
        True,
    ),
    "hiredis.Reader(protocolError, replyError), hiredis.pack_command": (_old_hiredis, False),
}


@contextlib.contextmanager
def _broken(name: str) -> Iterator[bool]:
    """``name`` taken away; yields whether it stays so after the check."""
    breaker, stays = BREAKERS[name]
    with pytest.MonkeyPatch.context() as m:
        breaker(m)
        yield stays


@pytest.fixture
def fresh_check() -> Iterator[None]:
    """The start-up check runs again (it runs once per process), and again after the test."""
    fast_paths_usable.cache_clear()
    yield
    fast_paths_usable.cache_clear()


def test_every_internal_has_a_breaker_and_none_is_missing_as_installed() -> None:
    assert set(BREAKERS) == {internal.name for internal in check.INTERNALS}
    assert check.missing_internals() == []


@pytest.mark.parametrize("name", list(BREAKERS))
def test_the_check_names_what_is_missing_in_one_warning(
    name: str, fresh_check: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="app.compat.redis_fast")
    with _broken(name):
        assert check.missing_internals() == [name]
        assert not fast_paths_usable()
        assert not fast_paths_usable()  # checked once: no second warning
    warnings = [r for r in caplog.records if r.name == "app.compat.redis_fast"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert name in warnings[0].getMessage()


async def _run_streams(gw: RunningGateway, key: str) -> None:
    """A run of five deltas, streamed to its end, on ``gw``."""
    async with gw.client() as client:
        frames = await collect_sse(
            client,
            f"/v1/conversations/{key}/runs?stream=true",
            method="POST",
            json={"input": {"prompt": "text:5"}},
            stop=terminal,
        )
    events = events_of(frames)
    assert events[-1]["type"] == "run.completed"
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "message.delta"]
    assert "".join(deltas) == "w0 w1 w2 w3 w4 "


@pytest.mark.parametrize("name", list(BREAKERS))
async def test_with_an_internal_missing_the_gateway_serves_runs_on_the_public_path(
    name: str,
    backend_kind: str,
    start_gateway: StartGateway,
    fresh_check: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="app.compat.redis_fast")
    clients: list[Redis] = []

    def recorded(url: str, *args: Any, **kwargs: Any) -> Redis:
        clients.append(redis_client(url, *args, **kwargs))
        return clients[-1]

    monkeypatch.setattr(gateway_server, "redis_client", recorded)  # what the test gateway uses
    with contextlib.ExitStack() as broken:
        stays = broken.enter_context(_broken(name))
        if backend_kind == "redis":
            assert not fast_paths_usable()  # the start-up check, as the gateway starts
            if not stays:
                broken.close()  # redis-py's own code needs it back (see the module's docstring)
        gw = await start_gateway(providers={"demo": ScriptedProvider()})
        await _run_streams(gw, f"fallback-{backend_kind}")
        await _run_streams(gw, f"fallback-{backend_kind}")  # a second run, on warm connections
    warnings = [r for r in caplog.records if r.name == "app.compat.redis_fast"]
    if backend_kind == "redis":
        (client,) = clients
        assert type(client) is Redis and not uses_fast_paths(client)
        assert len(warnings) == 1 and name in warnings[0].getMessage()
    else:
        assert warnings == [] and clients == []  # the memory backend does not use redis-py


async def test_with_every_internal_there_the_client_takes_the_fast_paths(
    fresh_check: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="app.compat.redis_fast")
    client = redis_client(SHARED_REDIS_URL)
    try:
        assert isinstance(client, LeanRedis) and uses_fast_paths(client)
        assert await client.ping()
    finally:
        await client.aclose()
    stock = redis_client(SHARED_REDIS_URL, fast_paths=False)  # [gateway] fast_paths = false
    try:
        assert type(stock) is Redis and not uses_fast_paths(stock)
        assert await stock.ping()
    finally:
        await stock.aclose()
    assert not [r for r in caplog.records if r.name == "app.compat.redis_fast"]
