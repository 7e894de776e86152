"""``multitask: "enqueue"`` across instances: one FIFO and one bound per conversation, cluster-wide.

Two gateways (A and B, in-process, one Redis key prefix) accept runs of one conversation in
turn; the runs start in the order they were accepted, whichever instance accepted them, and the
bound ``enqueue_max`` counts the runs waiting on every instance.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from app.backends import ConversationRef
from app.backends.redis import RedisBackend
from app.backends.redis.adoption import encode_request
from app.backends.redis.queue import RunQueue
from app.backends.types import QueuedRun
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

pytestmark = pytest.mark.only_backend(
    "redis",
    "redis-cluster",
    reason="runs queued on several instances: one cluster-wide queue exists only on Redis",
)

KEY = "fifo"
RUNS = f"/v1/conversations/{KEY}/runs"
EVENTS = f"/v1/conversations/{KEY}/events"
TERMINALS = ("run.completed", "run.failed", "run.cancelled")


async def _pair(
    start_gateway: StartGateway, *providers: ScriptedProvider, **gateway: Any
) -> list[RunningGateway]:
    """Two instances on one Redis; ``providers`` (one each) when the test drives them."""
    settings = make_settings(gateway={"heartbeat_seconds": 1, **gateway})
    chosen = providers or (ScriptedProvider(), ScriptedProvider())
    return [await start_gateway(settings, providers={"demo": p}) for p in chosen]


async def _started_runs(client: httpx.AsyncClient, count: int) -> list[str]:
    """The run ids of the first ``count`` run.started events of the conversation, in log order."""
    started: list[str] = []

    def enough(frames: list[Any]) -> bool:
        last = frames[-1]
        if last.event == "message" and orjson.loads(last.data)["type"] == "run.started":
            started.append(orjson.loads(last.data)["runId"])
        return len(started) >= count

    await collect_sse(client, EVENTS, params={"since": "0"}, stop=enough)
    return started


def _backend(gw: RunningGateway) -> RedisBackend:
    inner = gw.gateway.backend.inner  # type: ignore[attr-defined]
    assert isinstance(inner, RedisBackend)
    return inner


async def test_enqueued_runs_start_in_arrival_order_across_instances_and_share_one_bound(
    start_gateway: StartGateway,
) -> None:
    a, b = await _pair(start_gateway, enqueue_max=4)
    async with a.client() as ca, b.client() as cb:
        first = await start_run(ca, KEY, "text:1 sleep:1")
        queued = []
        for client in (cb, ca, cb, ca):  # alternate instances
            answer = await start_run(client, KEY, "text:1", multitask="enqueue")
            assert answer["status"] == "queued"
            queued.append(answer["runId"])
        # 4 runs wait in all (2 per instance): the bound is cluster-wide.
        full = await cb.post(RUNS, json={"input": {"prompt": "x"}, "multitask": "enqueue"})
        assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
        # While runs wait, a run that was not queued does not jump the queue.
        rejected = await cb.post(RUNS, json={"input": {"prompt": "x"}, "multitask": "reject"})
        assert rejected.status_code == 409
        assert await _started_runs(cb, 5) == [first["runId"], *queued]


async def test_a_queued_run_aborted_on_another_instance_is_cancelled_in_its_turn(
    start_gateway: StartGateway,
) -> None:
    a, b = await _pair(start_gateway)
    async with a.client() as ca, b.client() as cb:
        first = await start_run(ca, KEY, "text:1 sleep:1")
        dropped = await start_run(ca, KEY, "text:1", multitask="enqueue")
        last = await start_run(cb, KEY, "text:1", multitask="enqueue")
        answer = await cb.post(
            f"/v1/conversations/{KEY}/abort", json={"runId": dropped["runId"]}
        )  # queued on A, aborted through B
        assert answer.status_code == 202 and answer.json()["runId"] == dropped["runId"]
        assert await _started_runs(ca, 3) == [first["runId"], dropped["runId"], last["runId"]]
        frames = await collect_sse(ca, EVENTS, params={"since": "0", "untilIdle": "true"})
    events = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ends = {e["runId"]: e for e in events if e["type"] in ("run.completed", "run.cancelled")}
    assert ends[dropped["runId"]]["type"] == "run.cancelled"
    assert ends[dropped["runId"]]["payload"]["reason"] == "aborted"
    assert ends[last["runId"]]["type"] == "run.completed"
    assert a.gateway.runs.active_count() == 0


async def test_the_queued_runs_of_a_lost_instance_are_adopted_in_their_turn(
    start_gateway: StartGateway,
) -> None:
    (a, _) = await _pair(start_gateway)
    backend = _backend(a)
    ref = ConversationRef("anonymous", KEY)
    keys = backend.keys(ref)
    async with a.client() as ca:
        await start_run(ca, KEY, "text:1")  # the conversation exists and is idle again
        await _started_runs(ca, 1)
        # Never renews; 5 s: the 409 below is asked well before the tickets lapse, even under load.
        ghost = RunQueue(backend.redis, "ghost", ttl_ms=5000, prefix=keys.prefix)
        lost = [f"run_ghost{i}" for i in (1, 2)]
        for run_id in lost:
            run = QueuedRun(run_id, {"prompt": f"text:1 say:{run_id}"}, "demo")
            assert await ghost.enqueue(keys, run_id, encode_request(ref, run), None, False)
        await ghost.mark(keys)
        waiting = await ca.post(RUNS, json={"input": {"prompt": "x"}, "multitask": "reject"})
        assert waiting.status_code == 409  # the ghost's runs are first in line
        mine = await start_run(ca, KEY, "text:1", multitask="enqueue")  # queued behind them
        # The ghost's tickets lapse (5 s) and A adopts them: they run first, in their order.
        started = await _started_runs(ca, 4)
        assert started[1:] == [*lost, mine["runId"]]
        frames = await collect_sse(ca, EVENTS, params={"since": "0", "untilIdle": "true"})
    events = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ends = [(e["runId"], e["type"]) for e in events if e["type"] in TERMINALS]
    assert ends[1:] == [(run_id, "run.completed") for run_id in [*lost, mine["runId"]]]
    inputs = {e["runId"]: e["payload"]["input"] for e in events if e["type"] == "run.started"}
    assert inputs[lost[1]] == {"prompt": f"text:1 say:{lost[1]}"}  # its stored input


async def test_until_idle_on_another_instance_waits_for_the_runs_queued_there(
    start_gateway: StartGateway,
) -> None:
    a, b = await _pair(start_gateway)
    async with a.client() as ca, b.client() as cb:
        first = await start_run(ca, KEY, "text:1 sleep:1")
        second = await start_run(ca, KEY, "text:1", multitask="enqueue")
        frames = await collect_sse(
            cb, EVENTS, params={"since": first["cursor"], "untilIdle": "true"}
        )  # on B, which has nothing running or queued itself
    ends = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ends = [(e["runId"], e["type"]) for e in ends if e["type"].startswith("run.")]
    assert ends == [
        (first["runId"], "run.started"),
        (first["runId"], "run.completed"),
        (second["runId"], "run.started"),
        (second["runId"], "run.completed"),
    ]


async def test_the_record_of_a_run_queued_on_another_instance(
    start_gateway: StartGateway,
) -> None:
    a, b = await _pair(start_gateway)
    async with a.client() as ca, b.client() as cb:
        await start_run(ca, KEY, "text:1 sleep:1")
        queued = await start_run(ca, KEY, "text:1", multitask="enqueue")
        path = f"/v1/conversations/{KEY}/runs/{queued['runId']}"
        record = (await cb.get(path)).json()
        assert record["status"] == "queued", record
        ended = (await cb.get(f"{path}/wait", params={"timeout": 10})).json()
        assert ended["status"] == "completed"
        assert (await cb.get(f"/v1/conversations/{KEY}/runs/run_nope")).status_code == 404


async def test_interrupt_through_another_instance(start_gateway: StartGateway) -> None:
    providers = [ScriptedProvider(), ScriptedProvider()]
    a, b = await _pair(start_gateway, *providers)
    async with a.client() as ca, b.client() as cb:
        first = await start_run(ca, KEY, "text:1 sleep:30")
        # The second run holds until the gate opens, on whichever instance runs it.
        second = await start_run(cb, KEY, "text:2 gate:hold", multitask="interrupt")
        assert second["status"] == "started"
        state = (await ca.get(f"/v1/conversations/{KEY}/state")).json()
        assert state["activeRunId"] == second["runId"]  # the 202 came after its run.started
        for provider in providers:
            provider.gates["hold"].set()
        frames = await collect_sse(
            ca, EVENTS, params={"since": second["cursor"], "untilIdle": "true"}
        )
    events = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ends = [(e["runId"], e["type"]) for e in events if e["type"].startswith("run.")]
    assert ends == [
        (first["runId"], "run.cancelled"),
        (second["runId"], "run.started"),
        (second["runId"], "run.completed"),
    ]


async def test_delete_through_another_instance_drops_the_queue(
    start_gateway: StartGateway,
) -> None:
    a, b = await _pair(start_gateway)
    async with a.client() as ca, b.client() as cb:
        await start_run(ca, KEY, "text:1 sleep:30")
        await start_run(ca, KEY, "text:1", multitask="enqueue")
        assert (await cb.delete(f"/v1/conversations/{KEY}")).status_code == 204
        # A's worker ends the aborted run and skips the dropped one.
        await eventually(lambda: a.gateway.runs.active_count() == 0, what="A has no run left")
        for client in (ca, cb):
            assert (await client.get(f"/v1/conversations/{KEY}/state")).status_code == 404
        fresh = await start_run(cb, KEY, "text:1", multitask="reject")  # a clean new start
        assert fresh["status"] == "started"
