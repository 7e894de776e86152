"""The pushed-SSE scenario, shared by the stream tests and the tracing tests: a subscriber waits
at the head of ``c1`` while a gated run appends one delta at a time, so each delta after a gate
is pushed (written by the appending side, no wake-up) and every event arrives once, in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from httpx_sse import ServerSentEvent

from app.backends import Backend, ConversationRef, LogEntry, MemoryBackend
from app.backends.redis import RedisBackend
from app.streams import sse
from tests.app.support.gateway_server import RunningGateway
from tests.app.support.helpers import collect_sse, events_of, start_run, terminal
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

__all__ = ["PushedRun", "follow_a_gated_run", "innermost", "parked_with_sink", "read_waits"]

#: The scenario's conversation, as the anonymous principal of the test gateways.
REF_C1 = ConversationRef("anonymous", "c1")


def innermost(backend: Backend) -> Backend:
    """The backend under the gateway's wrappers (metrics, archive)."""
    while hasattr(backend, "_inner"):
        backend = backend._inner
    return backend


def memory_of(backend: Backend) -> MemoryBackend:
    """The memory backend under the gateway's wrappers."""
    inner = innermost(backend)
    assert isinstance(inner, MemoryBackend)
    return inner


def read_waits(backend: Backend, ref: ConversationRef) -> dict[Any, Any]:
    """The reads of ``ref`` waiting at the head, each with its sink or None (memory: on its
    notifier; Redis: on its log reader)."""
    backend = innermost(backend)
    if isinstance(backend, RedisBackend):
        reader = backend.hub.readers.get(backend.keys(ref).tag)
        return {} if reader is None else reader._waiters
    notifier = memory_of(backend)._notifiers.get(ref)
    return {} if notifier is None else notifier.waiters


def parked_with_sink(backend: Backend, ref: ConversationRef) -> bool:
    """A read of ``ref`` waits with a sink."""
    return any(s is not None for s in read_waits(backend, ref).values())


@dataclass
class PushedRun:
    """What :func:`follow_a_gated_run` saw: the run's start answer and the subscriber's frames."""

    run: dict[str, Any]
    frames: list[ServerSentEvent]


async def follow_a_gated_run(
    gw: RunningGateway, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> PushedRun:
    """Follow ``c1`` over SSE while ``provider`` runs ``text:1 gate:a text:1 gate:b text:1``;
    each gate opens once the subscriber has the delta before it and its read waits at the head
    with a sink, so the one delta after the gate is appended alone and pushed (memory: by the
    append; Redis: by the run writer's feed of the instance's log reader).

    Asserts that every event arrived once, in order, and that at least two of the writes were
    pushes (``sse._Pusher`` answered True), the two deltas after the gates."""
    pushes = 0
    original = sse._Pusher.__call__

    def counting(self: sse._Pusher, entries: list[LogEntry]) -> bool:
        nonlocal pushes
        done = original(self, entries)
        pushes += done
        return done

    monkeypatch.setattr(sse._Pusher, "__call__", counting)
    deltas_seen = 0

    def until_terminal(frames: list[ServerSentEvent]) -> bool:
        nonlocal deltas_seen
        deltas_seen = sum(b'"message.delta"' in f.data.encode() for f in frames)
        return terminal(frames)

    async with gw.client() as client:
        following = asyncio.Event()
        reader = asyncio.create_task(
            collect_sse(
                client, "/v1/conversations/c1/events", stop=until_terminal, first_frame=following
            )
        )
        await asyncio.wait_for(following.wait(), 10)
        run = await start_run(client, "c1", "text:1 gate:a text:1 gate:b text:1")
        for count, gate in ((1, "a"), (2, "b")):
            await eventually(lambda n=count: deltas_seen == n, what=f"delta {count}")  # type: ignore[misc]
            await eventually(
                lambda: parked_with_sink(gw.gateway.backend, REF_C1), what="a read parked"
            )
            provider.gates[gate].set()
        frames = await asyncio.wait_for(reader, 10)
    events = events_of(frames)
    sequences = [e["sequence"] for e in events]
    assert sequences == list(range(len(events))), sequences
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "message.delta"]
    assert deltas == ["w0 "] * 3, deltas
    ids = [f.id for f in frames]
    assert len(ids) == len(set(ids)), ids
    assert pushes >= 2, f"{pushes} pushed writes, expected the two deltas after the gates"
    return PushedRun(run, frames)
