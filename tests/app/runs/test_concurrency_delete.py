"""DELETE, then the same conversationKey created again while the old run outlives the shutdown
grace: the old run's late writes (events, its final meta) never reach the new incarnation."""

from __future__ import annotations

import asyncio

import pytest

from app.backends import ConversationRef
from tests.app.runs.concurrency_support import Gateways, HeldProvider, gateways
from tests.app.support.helpers import collect_sse, events_of, start_run

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

KEY = "reborn"


async def test_a_run_outliving_its_deleted_conversation_never_writes_into_the_new_one(
    gateways: Gateways,
) -> None:
    provider = HeldProvider()
    gw = await gateways(providers={"demo": provider})
    async with gw.client() as client:
        old = await start_run(client, KEY, "hold text:3")
        await provider.holding.wait()
        deleted = await client.delete(f"/v1/conversations/{KEY}")  # grace 0.2 s: it lives on
        assert deleted.status_code == 204
        new = await start_run(client, KEY, "text:2", multitask="enqueue")
        assert new["sessionId"] != old["sessionId"]
        new_ended = asyncio.Event()  # told once the new run (queued after the old one) ended
        gw.gateway.runs.run_listeners.append(
            lambda _, run_id: new_ended.set() if run_id == new["runId"] else None
        )
        provider.release.set()  # the old run goes on: its events, then its final meta
        await asyncio.wait_for(new_ended.wait(), 10)
        frames = await collect_sse(
            client,
            f"/v1/conversations/{KEY}/events",
            params={"since": "0", "untilIdle": "true"},
        )
    meta = await gw.gateway.backend.get_meta(ConversationRef("anonymous", KEY))
    assert meta is not None
    assert (meta.session_id, meta.last_run_id) == (new["sessionId"], new["runId"])
    events = events_of(frames)
    assert {e["sessionId"] for e in events} == {new["sessionId"]}
    assert old["runId"] not in {e["runId"] for e in events}
    assert events[-1]["type"] == "run.completed" and events[-1]["runId"] == new["runId"]
