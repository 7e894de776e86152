"""SSE: frames, resume, snapshots for unknown/trimmed cursors, fan-out, stalled subscribers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse
from sse_starlette.sse import SendTimeoutError

from app.streams.sse import _send_within
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import (
    collect_sse,
    drained_to_eof,
    events_of,
    stalled_client,
    start_run,
    terminal,
    wait_metric,
    wait_state,
)
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

KEY = "c1"
EVENTS = f"/v1/conversations/{KEY}/events"


@pytest.fixture
async def gw(start_gateway: StartGateway) -> RunningGateway:
    settings = make_settings(gateway={"heartbeat_seconds": 0.2})
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


def parse_frames(raw: bytes) -> list[dict[str, str]]:
    frames = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block.strip():
            continue
        frame: dict[str, str] = {}
        for line in block.decode().split("\n"):
            name, _, value = line.partition(":")
            frame[name or "comment"] = value[1:] if value.startswith(" ") else value
        frames.append(frame)
    return frames


async def test_subscribe_before_the_first_run_gets_the_empty_snapshot(
    gw: RunningGateway,
) -> None:
    async with gw.client() as client:
        following = asyncio.Event()
        reader = asyncio.create_task(
            collect_sse(client, EVENTS, stop=terminal, first_frame=following)
        )
        await asyncio.wait_for(following.wait(), 10)
        assert (await client.get(f"/v1/conversations/{KEY}/state")).status_code == 404
        run = await start_run(client, KEY, "text:2")
        frames = await asyncio.wait_for(reader, 10)
    snapshot = orjson.loads(frames[0].data)
    assert frames[0].event == "snapshot" and frames[0].id == snapshot["cursor"]
    assert snapshot["activeRunId"] is None and snapshot["isRequesting"] is False
    assert snapshot["messages"] == [] and snapshot["agentState"]["runs"] == {}
    events = events_of(frames)
    assert [e["type"] for e in events][:3] == ["session.started", "run.started", "message.started"]
    assert {e["runId"] for e in events} == {run["runId"]}
    assert [e["sequence"] for e in events] == list(range(len(events)))


async def test_frames_headers_heartbeat_and_retry(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:1 ext:test.ext")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        async with client.stream("GET", EVENTS) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["x-accel-buffering"] == "no"
            # The start went through the middleware even though the body bypasses it.
            assert response.headers["x-request-id"]
            raw = b""
            async for chunk in response.aiter_bytes():
                raw += chunk
                if b": ping" in raw:
                    break
        async with client.stream("GET", EVENTS, params={"since": "0"}) as response:
            replay = b""
            async for chunk in response.aiter_bytes():
                replay += chunk
                if b"run.completed" in replay:
                    break
    frames = parse_frames(raw)
    assert frames[0]["event"] == "snapshot" and frames[0]["retry"].isdigit()
    assert frames[-1] == {"comment": "ping"}
    logged = parse_frames(replay)
    assert "retry" in logged[0]
    agent_frames = [f for f in logged if "event" not in f]
    assert agent_frames and all(set(f) <= {"id", "data", "retry"} for f in agent_frames)
    extension = [f for f in logged if f.get("event") == "extension"]
    assert len(extension) == 1 and extension[0]["id"]
    assert orjson.loads(extension[0]["data"]) == {"key": "test.ext", "value": {"n": 1}}
    state = (await gw.client().get(f"/v1/conversations/{KEY}/state")).json()
    assert state["extensions"] == {"test.ext": {"n": 1}}


async def test_resume_with_last_event_id_is_exact(gw: RunningGateway) -> None:
    async with gw.client() as client:
        run = await start_run(client, KEY, "text:20 sleep:0.3 text:20")
        first = await collect_sse(
            client,
            EVENTS,
            params={"since": run["cursor"]},
            stop=lambda frames: len(frames) >= 10,
        )
        assert all(f.event == "message" for f in first)
        last_id = first[-1].id
        second = await collect_sse(
            client, EVENTS, headers={"Last-Event-ID": last_id}, params={"untilIdle": "true"}
        )
        full = await collect_sse(
            client, EVENTS, params={"since": run["cursor"], "untilIdle": "true"}
        )
    assert all(f.event == "message" for f in second)
    union = [f.id for f in first] + [f.id for f in second]
    assert union == [f.id for f in full]
    assert len(set(union)) == len(union)
    assert events_of(first) + events_of(second) == events_of(full)
    assert events_of(full)[-1]["type"] == "run.completed"


async def test_unknown_cursor_yields_a_snapshot_first(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:2")
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        for headers, params in (
            ({"Last-Event-ID": "nonsense-42"}, {"untilIdle": "true"}),
            ({}, {"since": "zzz-1", "untilIdle": "true"}),
        ):
            frames = await collect_sse(client, EVENTS, headers=headers, params=params)
            assert [f.event for f in frames] == ["snapshot"]
            assert orjson.loads(frames[0].data)["cursor"] == state["cursor"] == frames[0].id


async def test_cursor_from_before_delete_is_unknown(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:2")
        old = (await wait_state(client, KEY, lambda s: not s["isRequesting"]))["cursor"]
        await client.delete(f"/v1/conversations/{KEY}")
        await start_run(client, KEY, "text:1")
        new = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        frames = await collect_sse(
            client, EVENTS, headers={"Last-Event-ID": old}, params={"untilIdle": "true"}
        )
    assert [f.event for f in frames] == ["snapshot"]
    assert orjson.loads(frames[0].data)["cursor"] == new["cursor"] != old


async def test_trimmed_cursor_yields_a_snapshot_then_later_events(
    start_gateway: StartGateway,
) -> None:
    settings = make_settings(gateway={"event_log_max_len": 5})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()})
    async with gw.client() as client:
        run = await start_run(client, KEY, "text:10")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        frames = await collect_sse(
            client, EVENTS, params={"since": run["cursor"], "untilIdle": "true"}
        )
        assert [f.event for f in frames] == ["snapshot"]
        second = await start_run(client, KEY, "sleep:0.3 text:3")
        frames = await collect_sse(client, EVENTS, params={"since": run["cursor"]}, stop=terminal)
    assert frames[0].event == "snapshot"
    snapshot = orjson.loads(frames[0].data)
    later = events_of(frames[1:])
    assert later[-1]["type"] == "run.completed"
    assert all(e["runId"] == second["runId"] for e in later)
    seen = snapshot["agentState"]["lastSequenceByRun"].get(second["runId"], -1)
    assert [e["sequence"] for e in later] == list(range(seen + 1, seen + 1 + len(later)))


async def test_until_idle_closes_at_once_when_idle(gw: RunningGateway) -> None:
    async with gw.client() as client:
        frames = await collect_sse(client, EVENTS, params={"untilIdle": "true"})
    assert [f.event for f in frames] == ["snapshot"]


async def test_post_runs_stream_true(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:1")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        frames = await collect_sse(
            client,
            f"/v1/conversations/{KEY}/runs",
            method="POST",
            params={"stream": "true"},
            json={"input": {"prompt": "text:3"}},
        )
    events = events_of(frames)
    assert all(f.event == "message" for f in frames)
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.completed"
    assert len({e["runId"] for e in events}) == 1


async def test_post_runs_stream_true_names_its_run_after_runs_queued_before_it(
    start_gateway: StartGateway,
) -> None:
    provider = ScriptedProvider()
    gw = await start_gateway(make_settings(), providers={"demo": provider})
    runs = f"/v1/conversations/{KEY}/runs"
    body = {"input": {"prompt": "text:3"}, "multitask": "enqueue"}
    mine = {"Idempotency-Key": "mine"}
    async with gw.client() as client:
        first = await start_run(client, KEY, "text:1 gate:first text:1")
        queued = await start_run(client, KEY, "text:2", multitask="enqueue")
        assert queued["status"] == "queued"
        stream = aconnect_sse(
            client, "POST", runs, params={"stream": "true"}, json=body, headers=mine
        )
        async with stream as source:
            assert source.response.status_code == 200
            run_id = source.response.headers["x-run-id"]
            provider.gates["first"].set()
            frames = [sse async for sse in source.aiter_sse() if sse.data]
        retried = await client.post(runs, params={"stream": "true"}, json=body, headers=mine)
    events = events_of(frames)
    # The queued run starts first in this stream; the header names the stream's own run.
    assert [e["runId"] for e in events if e["type"] == "run.started"] == [queued["runId"], run_id]
    assert run_id not in {first["runId"], queued["runId"]}
    assert (events[-1]["type"], events[-1]["runId"]) == ("run.completed", run_id)
    assert retried.headers["x-run-id"] == run_id


async def test_fifty_subscribers_receive_identical_sequences(gw: RunningGateway) -> None:
    async with gw.client(limits=httpx.Limits(max_connections=60)) as client:
        following = [asyncio.Event() for _ in range(50)]
        readers = [
            asyncio.create_task(collect_sse(client, EVENTS, stop=terminal, first_frame=event))
            for event in following
        ]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in following)), 20)
        await start_run(client, KEY, "text:30 sleep:0.05 text:30")
        results = await asyncio.wait_for(asyncio.gather(*readers), 60)
    sequences = [[(f.id, f.data) for f in frames[1:]] for frames in results]
    assert len(sequences[0]) == 67  # session, run, user message (2), 62 of m1, terminal
    assert all(seq == sequences[0] for seq in sequences)


async def test_detach_is_not_abort(gw: RunningGateway) -> None:
    async with gw.client() as client:
        run = await start_run(client, KEY, "text:3 sleep:3 text:3")
        for _ in range(3):  # every subscriber leaves mid-run
            left = await collect_sse(client, EVENTS, stop=lambda frames: len(frames) >= 1)
            assert orjson.loads(left[0].data)["isRequesting"] is True
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        frames = await collect_sse(client, EVENTS, params={"untilIdle": "true"})
    snapshot = orjson.loads(frames[0].data)
    assert snapshot["agentState"]["runs"][run["runId"]]["status"] == "completed"
    assert snapshot["messages"][-1]["message"]["content"] == "w0 w1 w2 " * 2


async def test_stalled_subscriber_is_dropped_and_does_not_delay_others(
    start_gateway: StartGateway,
) -> None:
    settings = make_settings(gateway={"send_timeout_seconds": 3, "heartbeat_seconds": 30})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    stalled = await stalled_client(gw.port, f"GET {EVENTS} HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        async with gw.client() as client:
            await wait_metric(client, "agent_gateway_subscribers", 1)  # the stalled one follows
            loop = asyncio.get_running_loop()
            started = loop.time()
            following = asyncio.Event()
            healthy = asyncio.create_task(
                collect_sse(client, EVENTS, stop=terminal, first_frame=following)
            )
            await asyncio.wait_for(following.wait(), 10)
            await start_run(client, KEY, "text:200:2000")
            frames = await asyncio.wait_for(healthy, 20)
            elapsed = loop.time() - started
            assert events_of(frames)[-1]["type"] == "run.completed"
            assert len(events_of(frames)) == 207  # 200 deltas + 7 framing events
            # The healthy subscriber got everything before the stalled one could be dropped:
            # nothing waited on the stalled send.
            assert elapsed < 3
            # Still stalled (never read): dropped once send_timeout_seconds (3 s) passed.
            await wait_metric(client, "agent_gateway_dropped_subscribers_total", 1)
            assert await drained_to_eof(stalled, 5.0), "stalled subscriber was not closed"
    finally:
        stalled.close()


async def test_shutdown_delivers_run_cancelled_before_closing(
    start_gateway: StartGateway,
) -> None:
    settings = make_settings(gateway={"shutdown_grace_seconds": 0.3})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()})
    async with gw.client() as client:
        run = await start_run(client, KEY, "text:2 sleep:30")
        reader = asyncio.create_task(collect_sse(client, EVENTS, params={"since": run["cursor"]}))
        await wait_state(client, KEY, lambda s: s["isRequesting"])
        stopping = asyncio.create_task(gw.stop())
        await eventually(lambda: gw.gateway.runs.shutting_down, what="the drain began")
        refused: Any = await client.post(
            f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "x"}}
        )
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "shutting_down"
        frames = await asyncio.wait_for(reader, 15)
        await asyncio.wait_for(stopping, 15)
    last = events_of(frames)[-1]
    assert last["type"] == "run.cancelled" and last["payload"]["reason"] == "shutdown"
    assert last["runId"] == run["runId"]


def test_coalesced_sends_are_capped_in_bytes() -> None:
    from app.backends import LogEntry
    from app.streams.sse import COALESCE_BYTES, _coalesced

    def entry(i: int, size: int) -> LogEntry:
        return LogEntry.for_event(f"x-{i}", {"type": "message.delta", "pad": "p" * size})

    entries = [entry(i, 5000) for i in range(10)] + [entry(10, 3 * COALESCE_BYTES)]
    sends = list(_coalesced(entries))
    assert b"".join(sends) == b"".join(e.sse for e in entries)
    assert all(len(s) <= COALESCE_BYTES for s in sends)
    # A frame larger than the cap goes alone, in pieces of the cap (a stalled
    # subscriber must not pin a whole large frame in its transport buffer).
    big = entries[-1].sse
    pieces = -(-len(big) // COALESCE_BYTES)
    assert b"".join(sends[-pieces:]) == big
    assert len(sends) - pieces < len(entries) - 1


async def test_shutdown_lets_a_run_finish_within_the_grace(start_gateway: StartGateway) -> None:
    settings = make_settings(gateway={"shutdown_grace_seconds": 5})
    provider = ScriptedProvider()
    gw = await start_gateway(settings, providers={"demo": provider})
    async with gw.client() as client:
        run = await start_run(client, KEY, "gate:go text:2")  # in flight until the gate opens
        reader = asyncio.create_task(collect_sse(client, EVENTS, params={"since": run["cursor"]}))
        await wait_state(client, KEY, lambda s: s["isRequesting"])
        stopping = asyncio.create_task(gw.stop())
        await eventually(lambda: gw.gateway.runs.shutting_down, what="the drain has begun")
        provider.gates["go"].set()  # the run ends during the shutdown, within its grace
        await stopping
        frames = await asyncio.wait_for(reader, 10)
    assert events_of(frames)[-1]["type"] == "run.completed"


async def test_send_within_times_out_a_blocked_send_only(monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    timers: list[asyncio.TimerHandle] = []
    call_later = loop.call_later

    def recorded(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        timers.append(call_later(delay, callback, *args))
        return timers[-1]

    monkeypatch.setattr(loop, "call_later", recorded)

    async def blocked() -> None:
        await release.wait()

    started = asyncio.get_running_loop().time()
    with pytest.raises(SendTimeoutError):
        await _send_within(blocked(), 0.2)
    assert asyncio.get_running_loop().time() - started < 5.0
    # A send that completes in time returns normally; no timer is left to fire later.
    release.set()
    await _send_within(blocked(), 0.2)
    assert len(timers) == 2 and timers[-1].cancelled()
    # A cancellation from outside stays a cancellation.
    task = asyncio.ensure_future(_send_within(asyncio.sleep(3600), 30))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
