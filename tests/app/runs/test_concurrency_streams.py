"""``POST …/runs?stream=true`` replayed (same Idempotency-Key), concurrently and after the log
was trimmed: the same run's stream again, a snapshot frame only when events are gone, and the
end as soon as the run's terminal is in the snapshot or the stream; a ``Last-Event-ID``
continues after what the client already has."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from tests.app.runs.concurrency_support import TERMINALS, CountingProvider, Gateways, gateways
from tests.app.support.gateway_server import make_settings
from tests.app.support.helpers import collect_sse, events_of

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

KEY = "replay"
RUNS = f"/v1/conversations/{KEY}/runs"
REPLAYS = 6


def _ended(frames: list[ServerSentEvent]) -> bool:
    """The stream's last frame is a run terminal, or a snapshot whose runs are all over."""
    last = frames[-1]
    if last.event == "snapshot":
        runs = orjson.loads(last.data)["agentState"]["runs"].values()
        return bool(runs) and all(run["status"] != "running" for run in runs)
    return last.event == "message" and orjson.loads(last.data)["type"] in TERMINALS


def _run_id(frames: list[ServerSentEvent]) -> str:
    """The one run's id: from its events, or from the snapshot frame when a log of 5 was
    trimmed before this (first) stream attached."""
    events = events_of(frames)
    if events:
        return str(events[-1]["runId"])
    (run_id,) = orjson.loads(frames[0].data)["agentState"]["runs"]
    return str(run_id)


async def _replay(client: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> list[Any]:
    async with asyncio.timeout(10):  # the bug: a snapshot frame, then pings forever
        return await collect_sse(
            client,
            RUNS,
            method="POST",
            params={"stream": "true"},
            json=body,
            headers={"Idempotency-Key": "k-1", **headers},
        )


async def test_replays_after_the_log_was_trimmed_end_with_the_snapshot(
    gateways: Gateways,
) -> None:
    # Redis persists the snapshot every snapshot_every events: below the retained length.
    gateway = {"event_log_max_len": 5, "snapshot_every": 2, "heartbeat_seconds": 1}
    settings = make_settings(gateway=gateway)
    gw = await gateways(settings, providers={"demo": CountingProvider()})
    body = {"input": {"prompt": "text:40"}}
    async with gw.client() as client:
        first = await _replay(client, body)
        assert _ended(first)
        run_id = _run_id(first)
        replays = await asyncio.gather(*(_replay(client, body) for _ in range(REPLAYS)))
    for frames in replays:
        assert frames[0].event == "snapshot", [f.event for f in frames]  # its events are gone
        assert _ended(frames)
        snapshot = orjson.loads(frames[0].data)
        assert snapshot["agentState"]["runs"][run_id]["status"] == "completed"
        assert len(snapshot["agentState"]["runs"]) == 1  # no second run


async def test_a_replay_with_last_event_id_continues_after_it(gateways: Gateways) -> None:
    gw = await gateways(providers={"demo": CountingProvider()})
    body = {"input": {"prompt": "text:3 sleep:0.3 text:3"}}
    async with gw.client() as client:
        seen: list[ServerSentEvent] = []
        async with aconnect_sse(
            client, "POST", RUNS, params={"stream": "true"}, json=body,
            headers={"Idempotency-Key": "k-1"},
        ) as source:  # fmt: skip
            async for sse in source.aiter_sse():
                if sse.data:
                    seen.append(sse)
                if len(seen) == 3:
                    break  # the client drops; it reconnects with the id of its last frame
        rest = await asyncio.gather(
            *(_replay(client, body, **{"Last-Event-ID": seen[-1].id}) for _ in range(REPLAYS))
        )
    for frames in rest:
        assert frames[0].event == "message", [f.event for f in frames]  # no snapshot needed
        assert _ended(frames)
        ids = [f.id for f in seen + frames]
        assert len(ids) == len(set(ids))  # nothing twice
        events = events_of(seen + frames)
        sequences = [e["sequence"] for e in events]
        assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
