"""redis-py's fast paths: the gateway's Redis client past redis-py's per-command layers.

Measured (BENCHMARKS.md, "Redis fast paths"; ``bench/ab_trees.py`` compares the trees): the
public path costs more than 10 % on headline Redis figures, so these stay, behind
:func:`fast_paths_usable` (the start-up check) and ``[gateway] fast_paths``. ``redis`` is
pinned exactly in ``pyproject.toml``.

Modules: :mod:`.lean` (commands and plain pipelines straight onto an idle pooled connection),
:mod:`.command_mux` (every task's data commands share round trips on one held connection),
:mod:`.script_pipeline` (the append script's calls share round trips), :mod:`.wire` (a held
connection's socket driven directly), :mod:`.packing` / :mod:`.append_packing` (RESP packed
by hiredis / from cached pieces), :mod:`.check` (the start-up check).

The internals of redis-py (and of asyncio, hiredis) touched, each verified by :mod:`.check`:

- ``ConnectionPool._available_connections`` / ``_in_use_connections``: ``LeanPool`` lends and
  takes back an idle connection without the pool's lock or an await (one event loop: nothing
  else runs in between).
- ``AbstractConnection._writer``: the transport, written to without ``wait_for``
  (``_SendWithoutTask``), aborted past a deadline (``Deadlines``), driven by a ``Wire``.
- ``AbstractConnection._reader`` and ``asyncio.StreamReader._buffer``, ``_parser._reader``:
  a connection holding unread bytes is never lent or driven (``wire.has_unread_data``).
- ``AbstractConnection._parser.parse_error``: redis-py's error classes for hiredis replies.
- ``AbstractConnection._resp2_fallback``: a connection that fell back to RESP2 is not muxed.
- ``Pipeline._execute_pipeline``, ``Pipeline.raise_first_error``, ``Pipeline.command_stack`` /
  ``scripts`` / ``explicit_transaction`` / ``watching``, ``Pipeline(...)``'s parameters: a plain
  pipeline sent on a lent connection, its replies answered as redis-py answers them.
- ``Redis.parse_response`` and ``redis.client.EMPTY_RESPONSE`` / ``NEVER_DECODE``: a command's
  reply read and finished as redis-py does (``lean.finish_reply`` copies its last step).
- ``AbstractConnection.send_packed_command`` (overridden) and ``should_reconnect``.
- ``hiredis.Reader(protocolError=, replyError=)`` and ``hiredis.pack_command`` (public, checked
  as they are used).

Public here: :func:`fast_client`, :func:`public_client`, :func:`uses_fast_paths`,
:func:`fast_paths_usable`, :class:`ScriptPipeline` (its public path needs no internal),
:func:`pack_append_args`.
"""

from __future__ import annotations

import weakref
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

from app.compat.redis_fast.append_packing import pack_append_args
from app.compat.redis_fast.check import fast_paths_usable
from app.compat.redis_fast.script_pipeline import ScriptPipeline

__all__ = [
    "ScriptPipeline",
    "fast_client",
    "fast_paths_usable",
    "pack_append_args",
    "public_client",
    "uses_fast_paths",
]

#: Clients made by :func:`public_client`: no fast path touches them.
_PUBLIC_ONLY: weakref.WeakSet[Redis] = weakref.WeakSet()


def fast_client(url: str, options: dict[str, Any]) -> Redis | None:
    """The client with every fast path for ``url`` (``options``: the pool's, as
    ``BlockingConnectionPool.from_url`` takes them); None where the start-up check found an
    internal missing (the caller builds redis-py's stock client)."""
    if not fast_paths_usable():
        return None
    # Imported only past the check: it imports redis-py names an upgrade may remove.
    from app.compat.redis_fast.command_mux import CommandMux
    from app.compat.redis_fast.lean import LeanPool, LeanRedis, send_without_task
    from app.compat.redis_fast.packing import pack_with_hiredis

    pool = LeanPool.from_url(url, **options)
    pack_with_hiredis(pool)
    send_without_task(pool)
    client = LeanRedis.from_pool(pool)  # it owns (and closes) its pool
    assert isinstance(client, LeanRedis)
    client.mux = CommandMux(client)
    return client


def public_client(url: str, options: dict[str, Any]) -> Redis:
    """redis-py's stock client for ``url`` (``options`` as for :func:`fast_client`): public
    API only, and :class:`ScriptPipeline` does not drive its sockets either."""
    client = Redis.from_pool(BlockingConnectionPool.from_url(url, **options))
    _PUBLIC_ONLY.add(client)
    return client


def uses_fast_paths(client: Redis) -> bool:
    """Whether the fast paths may drive ``client``'s connections: the start-up check passed
    and it is not a :func:`public_client` (``[gateway] fast_paths = false``)."""
    return fast_paths_usable() and client not in _PUBLIC_ONLY
