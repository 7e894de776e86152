"""Two gateway instances (A and B, separate processes) on one Redis serve one conversation.

Each test gets its own key prefix on the shared Redis, a short lease TTL and, where needed, a
slow OpenAI-compatible mock upstream that records when its connection is closed. The tests
marked ``ON_BOTH`` run on the shared Redis Cluster too (both processes with ``redis_cluster =
true``): a run streamed across instances and resumed on the other, and a killed owner; not
every one, to keep the suite's time (each starts two processes). An abort and a command across
instances run on the cluster in-process (``tests/app/runs/test_concurrency_*.py``).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from tests.app.support.cluster_support import (
    LEASE_TTL,
    TERMINALS,
    Subscriber,
    assert_closed,
    cluster,
    get_state,
    is_terminal,
    post_run,
)
from tests.app.support.redis_support import serve_slow_upstream
from tests.support import eventually

pytestmark = pytest.mark.only_backend("redis", reason="two gateway processes sharing one Redis")
#: The Redis the two processes share: standalone, and the shared Redis Cluster.
ON_BOTH = pytest.mark.parametrize("store", ["redis", "redis-cluster"])


@ON_BOTH
async def test_run_on_a_is_streamed_by_b_in_order_and_states_agree(store: str) -> None:
    async with cluster(store=store) as (a, b):
        sub = Subscriber(b.url, "c1", is_terminal)
        await sub.started()
        res = await post_run(a.url, "c1", {"input": {"prompt": "text:40"}})
        assert res.status_code == 202, res.text
        run_id = res.json()["runId"]
        events = await sub.done(15)
        assert [e["sequence"] for e in events] == list(range(len(events)))
        assert all(e["runId"] == run_id for e in events)
        types = [e["type"] for e in events]
        assert types[:2] == ["session.started", "run.started"]
        assert types.count("message.delta") == 40 and types[-1] == "run.completed"
        assert len(set(sub.ids)) == len(sub.ids)
        state_a, state_b = await get_state(a.url, "c1"), await get_state(b.url, "c1")
        assert state_a == state_b
        assert state_a["cursor"] == sub.ids[-1]
        assert not state_a["isRequesting"]
        # Resume on A from a cursor B handed out: exactly the rest, nothing repeated.
        resumed = Subscriber(a.url, "c1", is_terminal, since=sub.ids[9])
        rest = await resumed.done(10)
        assert not resumed.snapshots
        assert [e["sequence"] for e in rest] == list(range(10, len(events)))


async def test_abort_via_b_closes_the_upstream_of_the_run_on_a() -> None:
    # The upstream streams for 60 s unless the abort closes it.
    async with (
        serve_slow_upstream(chunks=1200) as upstream,
        cluster(upstream.url) as (a, b),
    ):
        sub = Subscriber(b.url, "c1", is_terminal)
        await sub.started()
        res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
        assert res.status_code == 202, res.text
        await asyncio.wait_for(upstream.started.wait(), 10)
        await eventually(lambda: sum(e["type"] == "message.delta" for e in sub.events) >= 3)
        async with httpx.AsyncClient(base_url=b.url, timeout=10.0) as client:
            t0 = time.monotonic()
            answer = await client.post("/v1/conversations/c1/abort", json={})
        assert answer.status_code == 202, answer.text
        assert answer.json() == {"runId": res.json()["runId"], "aborted": True}
        await asyncio.wait_for(upstream.disconnected.wait(), 10)
        assert upstream.disconnected_at is not None
        latency = upstream.disconnected_at - t0
        assert latency < 10, f"abort took {latency:.3f} s to reach the upstream"
        events = await sub.done(10)
        assert events[-1]["type"] == "run.cancelled"
        assert upstream.finished == 0
        assert_closed(await get_state(b.url, "c1"), res.json()["runId"])


async def test_command_via_b_reaches_the_owner_on_a() -> None:
    async with cluster() as (a, b):
        sub = Subscriber(b.url, "c1", lambda e: e["type"] == "approval.requested")
        await sub.started()
        res = await post_run(a.url, "c1", {"input": {"prompt": "approval:ap1"}})
        assert res.status_code == 202, res.text
        run_id = res.json()["runId"]
        await sub.done(10)
        follow = Subscriber(b.url, "c1", is_terminal, since=sub.ids[-1])
        async with httpx.AsyncClient(base_url=b.url, timeout=10.0) as client:
            answer = await client.post(
                "/v1/conversations/c1/approvals/ap1", json={"decision": "approved"}
            )
        assert answer.status_code == 202, answer.text
        assert answer.json()["runId"] == run_id
        events = await follow.done(10)
        types = [e["type"] for e in events]
        assert "approval.resolved" in types and types[-1] == "run.completed"
        state = await get_state(b.url, "c1")
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["status"] == "completed" and approval["decision"] == "approved"
        assert state == await get_state(a.url, "c1")


@ON_BOTH
async def test_kill_9_of_the_owner_fails_the_run_on_b_within_the_lease(store: str) -> None:
    async with (
        serve_slow_upstream() as upstream,
        cluster(upstream.url, lease_ttl=LEASE_TTL, store=store) as (a, b),
    ):
        sub = Subscriber(b.url, "c1", is_terminal)
        await sub.started()
        res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
        assert res.status_code == 202, res.text
        run_id = res.json()["runId"]
        await eventually(lambda: sum(e["type"] == "message.delta" for e in sub.events) >= 5)
        a.kill()
        killed_at = time.monotonic()
        events = await sub.done(LEASE_TTL + 5)
        detected = time.monotonic() - killed_at
        assert detected < LEASE_TTL + 2, f"lost owner noticed after {detected:.2f} s"
        last = events[-1]
        assert last["type"] == "run.failed"
        assert last["payload"]["error"]["code"] == "gateway_instance_lost"
        assert last["payload"]["error"]["retryable"] is True
        failed_message = [e for e in events if e["type"] == "message.failed"]
        assert len(failed_message) == 1  # the assistant message that was streaming
        assert [e["sequence"] for e in events] == list(range(len(events)))
        state = await get_state(b.url, "c1")
        assert state["agentState"]["runs"][run_id]["status"] == "failed"
        assert state["agentState"]["issues"] == []
        assert_closed(state, run_id)
        assert not state["isRequesting"]
        # Nothing after the fence: the log ends with the run.failed B saw.
        assert state["cursor"] == sub.ids[-1]
        # The conversation is usable again: a new run on B completes.
        res2 = await post_run(b.url, "c1", {"input": {"prompt": "text:3"}})
        assert res2.status_code == 202, res2.text


async def test_double_submit_storm_over_two_instances_gives_one_202() -> None:
    async with cluster() as (a, b):
        bodies = {"input": {"prompt": "sleep:2"}, "multitask": "reject"}
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=20.0) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=20.0) as cb,
        ):
            answers = await asyncio.gather(
                *(
                    (ca if i % 2 else cb).post("/v1/conversations/storm/runs", json=bodies)
                    for i in range(50)
                )
            )
            codes = sorted(r.status_code for r in answers)
            assert codes.count(202) == 1, codes
            assert codes.count(409) == 49, codes
            assert all(
                r.json()["error"]["code"] == "run_in_progress"
                for r in answers
                if r.status_code == 409
            )


async def test_interrupt_from_two_instances_never_runs_two_at_once() -> None:
    async with cluster() as (a, b):
        sub = Subscriber(b.url, "c2", lambda e: False)
        await sub.started()
        first = await post_run(a.url, "c2", {"input": {"prompt": "sleep:5"}})
        assert first.status_code == 202
        await eventually(lambda: any(e["type"] == "run.started" for e in sub.events))
        second = await post_run(
            b.url, "c2", {"input": {"prompt": "text:2"}, "multitask": "interrupt"}
        )
        assert second.status_code == 202, second.text
        second_id = second.json()["runId"]
        await eventually(
            lambda: any(
                e["type"] == "run.completed" and e["runId"] == second_id for e in sub.events
            )
        )
        sub.task.cancel()
        active: set[str] = set()
        order = []
        for e in sub.events:
            if e["type"] == "run.started":
                assert not active, "two runs active at once"
                active.add(e["runId"])
            elif e["type"] in TERMINALS:
                active.discard(e["runId"])
                order.append((e["runId"], e["type"]))
        assert order == [
            (first.json()["runId"], "run.cancelled"),
            (second.json()["runId"], "run.completed"),
        ]


async def test_until_idle_on_b_waits_for_the_run_on_a() -> None:
    async with cluster() as (a, b):
        res = await post_run(a.url, "c1", {"input": {"prompt": "text:2 sleep:1 text:2"}})
        assert res.status_code == 202
        started = time.monotonic()
        async with (
            httpx.AsyncClient(base_url=b.url, timeout=15.0) as client,
            aconnect_sse(
                client, "GET", "/v1/conversations/c1/events", params={"untilIdle": "true"}
            ) as source,
        ):
            frames = [sse async for sse in source.aiter_sse() if sse.data]
        # The stream on B stayed open until the run on A ended, then closed by itself.
        assert time.monotonic() - started > 0.8
        last = orjson.loads(frames[-1].data)
        assert last["type"] == "run.completed" and last["runId"] == res.json()["runId"]
        async with httpx.AsyncClient(base_url=b.url, timeout=15.0) as client:
            idle = await client.get("/v1/conversations/c1/events", params={"untilIdle": "true"})
        assert idle.status_code == 200 and "event: snapshot" in idle.text  # closes at once


async def test_many_conversations_at_once_over_two_instances() -> None:
    async with cluster() as (a, b):
        keys = [f"many-{i}" for i in range(12)]
        subs = {key: Subscriber(b.url, key, is_terminal) for key in keys}
        await asyncio.gather(*(sub.started() for sub in subs.values()))
        answers = await asyncio.gather(
            *(
                post_run((a if i % 2 else b).url, key, {"input": {"prompt": f"text:{10 + i}"}})
                for i, key in enumerate(keys)
            )
        )
        assert [r.status_code for r in answers] == [202] * len(keys)
        for i, key in enumerate(keys):
            events = await subs[key].done(20)
            assert {e["runId"] for e in events} == {answers[i].json()["runId"]}
            assert [e["sequence"] for e in events] == list(range(len(events)))
            assert sum(e["type"] == "message.delta" for e in events) == 10 + i
        states = await asyncio.gather(*(get_state(a.url, key) for key in keys))
        assert states == list(await asyncio.gather(*(get_state(b.url, key) for key in keys)))
