"""The start-up check: every redis-py internal the fast paths use is there, as they use it.

Each :class:`Internal` looks one up (a name, a signature via :mod:`inspect`, an attribute of a
freshly made, unconnected object). :func:`fast_paths_usable` runs them once per process; where
one does not match it logs ONE warning naming what is missing and answers False, and the
client is redis-py's stock one (public API only): an upgrade makes the gateway slower, never
broken.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, Connection
from redis.exceptions import InvalidResponse

__all__ = ["INTERNALS", "Internal", "fast_paths_usable", "missing_internals"]

log = logging.getLogger("app.compat.redis_fast")


@dataclass(frozen=True)
class Internal:
    #: What is used, as the package docstring lists it.
    name: str
    #: True while it is there as the fast paths use it.
    present: Callable[[], bool]


def _parameters(function: object, *names: str) -> bool:
    """``function``'s parameters are ``names`` in this order (``*args``/``**kw`` by name)."""
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return tuple(signature.parameters) == names


def _method(owner: type, name: str, *parameters: str) -> Callable[[], bool]:
    return lambda: _parameters(getattr(owner, name, None), "self", *parameters)


def _pool_attribute(name: str, *kinds: type) -> Callable[[], bool]:
    def present() -> bool:
        pool = BlockingConnectionPool(max_connections=1)  # connects nothing
        return hasattr(pool, name) and isinstance(getattr(pool, name), kinds)

    return present


def _connection_attribute(name: str) -> Callable[[], bool]:
    return lambda: hasattr(Connection(), name)  # an unconnected connection: None until then


def _parser_reader() -> bool:
    parser = getattr(Connection(), "_parser", None)
    return hasattr(parser, "_reader") and callable(getattr(parser, "parse_error", None))


def _stream_buffer() -> bool:
    loop = asyncio.new_event_loop()
    try:
        return isinstance(getattr(asyncio.StreamReader(loop=loop), "_buffer", None), bytearray)
    finally:
        loop.close()


def _resp2_fallback() -> bool:
    return isinstance(getattr(Connection(), "_resp2_fallback", None), bool)


def _read_options() -> bool:
    import redis.client

    return all(hasattr(redis.client, name) for name in ("EMPTY_RESPONSE", "NEVER_DECODE"))


def _pipeline_state() -> bool:
    pipe = Pipeline(BlockingConnectionPool(max_connections=1), {}, False, None)
    names = ("command_stack", "scripts", "explicit_transaction", "watching", "connection")
    return all(hasattr(pipe, name) for name in names) and isinstance(pipe.command_stack, list)


def _hiredis_reader() -> bool:
    try:
        reader = hiredis.Reader(protocolError=InvalidResponse, replyError=Exception)
    except TypeError:
        return False
    return all(hasattr(reader, m) for m in ("feed", "gets", "has_data")) and callable(
        getattr(hiredis, "pack_command", None)
    )


_PIPELINE_PARAMETERS = ("connection_pool", "response_callbacks", "transaction", "shard_hint")

INTERNALS: tuple[Internal, ...] = (
    Internal(
        "ConnectionPool._available_connections (list)",
        _pool_attribute("_available_connections", list),
    ),
    Internal(
        "ConnectionPool._in_use_connections (set)",
        _pool_attribute("_in_use_connections", set, weakref.WeakSet),
    ),
    Internal("AbstractConnection._writer", _connection_attribute("_writer")),
    Internal("AbstractConnection._reader", _connection_attribute("_reader")),
    Internal("AbstractConnection._parser._reader, .parse_error", _parser_reader),
    Internal("AbstractConnection._resp2_fallback (bool)", _resp2_fallback),
    Internal("asyncio.StreamReader._buffer (bytearray)", _stream_buffer),
    Internal(
        "Pipeline._execute_pipeline(connection, commands, raise_on_error)",
        _method(Pipeline, "_execute_pipeline", "connection", "commands", "raise_on_error"),
    ),
    Internal(
        "Pipeline.raise_first_error(commands, response)",
        _method(Pipeline, "raise_first_error", "commands", "response"),
    ),
    Internal(
        "Pipeline(connection_pool, response_callbacks, transaction, shard_hint)",
        _method(
            Pipeline,
            "__init__",
            "connection_pool",
            "response_callbacks",
            "transaction",
            "shard_hint",
        ),
    ),
    Internal(
        "Pipeline.command_stack, .scripts, .explicit_transaction, .watching, .connection",
        _pipeline_state,
    ),
    Internal(
        "Redis.parse_response(connection, command_name, **options)",
        _method(Redis, "parse_response", "connection", "command_name", "options"),
    ),
    Internal("redis.client.EMPTY_RESPONSE, NEVER_DECODE", _read_options),
    Internal(
        "AbstractConnection.send_packed_command(command, check_health)",
        _method(AbstractConnection, "send_packed_command", "command", "check_health"),
    ),
    Internal(
        "AbstractConnection.should_reconnect()",
        _method(AbstractConnection, "should_reconnect"),
    ),
    Internal("hiredis.Reader(protocolError, replyError), hiredis.pack_command", _hiredis_reader),
)


def missing_internals() -> list[str]:
    """The internals in :data:`INTERNALS` not there as the fast paths use them."""
    missing: list[str] = []
    for internal in INTERNALS:
        try:
            present = internal.present()
        except Exception:
            present = False
        if not present:
            missing.append(internal.name)
    return missing


@functools.cache
def fast_paths_usable() -> bool:
    """Whether every internal is there (checked once per process); if not, ONE warning."""
    missing = missing_internals()
    if missing:
        log.warning(
            "redis-py fast paths off (the public path is used): internals not found in "
            "redis %s: %s",
            _version(),
            "; ".join(missing),
        )
    return not missing


def _version() -> str:
    import redis

    return str(getattr(redis, "__version__", "?"))
