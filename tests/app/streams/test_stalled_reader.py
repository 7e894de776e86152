"""A subscriber that stops reading through a run far longer than the log: what it costs the
gateway, and what it receives when it reads again (``app/streams``).

Real gateway on loopback, a raw client socket with a 4 KB receive buffer (the server's send
buffer is 4 KB too, so the transport pauses at once), the scripted provider bursting events.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import tracemalloc
from typing import Any

import orjson

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import drained_to_eof, metric, stalled_client, start_run, wait_metric
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually_async

KEY = "stalled-reader"
EVENTS = f"/v1/conversations/{KEY}/events"
LOG_CAP = 300


class _SseReader:
    """Reads an SSE response from a raw socket: HTTP head, chunked body, frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.raw = b""
        self.body = b""
        self.head_done = False
        self.frames: list[dict[str, str]] = []

    async def _more(self) -> None:
        data = await asyncio.get_running_loop().sock_recv(self.sock, 1 << 16)
        assert data, "the gateway closed the stream"
        self.raw += data
        if not self.head_done:
            head, sep, rest = self.raw.partition(b"\r\n\r\n")
            if not sep:
                return
            assert head.startswith(b"HTTP/1.1 200"), head
            assert b"transfer-encoding: chunked" in head.lower(), head
            self.head_done, self.raw = True, rest
        while True:  # de-chunk
            size_line, sep, rest = self.raw.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line, 16)
            if len(rest) < size + 2:
                break
            self.body += rest[:size]
            self.raw = rest[size + 2 :]
        while b"\n\n" in self.body:
            block, _, self.body = self.body.partition(b"\n\n")
            frame: dict[str, str] = {}
            for line in block.decode().split("\n"):
                if line.startswith(":"):
                    continue  # heartbeat
                field, _, value = line.partition(": ")
                frame[field] = value
            if "data" in frame:
                self.frames.append(frame)

    async def until(self, check: Any, within: float = 20.0) -> None:
        async with asyncio.timeout(within):
            while not check(self.frames):
                await self._more()


def _event(frame: dict[str, str]) -> dict[str, Any] | None:
    if frame.get("event", "message") != "message":
        return None
    event: dict[str, Any] = orjson.loads(frame["data"])
    return event


def _is_completed(frames: list[dict[str, str]]) -> bool:
    event = _event(frames[-1]) if frames else None
    return event is not None and event["type"] == "run.completed"


def _processed_sequences(snapshot: dict[str, Any], run_id: str) -> set[int]:
    """The sequences of ``run_id``'s events the snapshot's state has applied."""
    pattern = re.compile(re.escape(run_id) + r":(\d+):[a-z_.]+$")
    found = (pattern.search(key) for key in snapshot["agentState"]["processedEventIds"])
    return {int(match.group(1)) for match in found if match}


def _text_of(snapshot: dict[str, Any]) -> str:
    messages = snapshot["messages"]
    return str(messages[-1]["message"]["content"]) if messages else ""


async def test_a_stalled_subscriber_that_closes_builds_nothing_for_the_gone_client(
    start_gateway: StartGateway,
) -> None:
    """Stalled from the start through a run ~70x the log, then closed: the gateway frees it
    without serializing the conversation (a snapshot of the whole run) for nobody."""
    settings = make_settings(
        gateway={
            "event_log_max_len": LOG_CAP,
            "send_timeout_seconds": 120,
            "heartbeat_seconds": 60,
        }
    )
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    stalled = await stalled_client(gw.port, f"GET {EVENTS} HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        async with gw.client(timeout=30.0) as client:
            await wait_metric(client, "agent_gateway_subscribers", 1)
            run = await start_run(client, KEY, "text:20000")
            done = await client.get(
                f"/v1/conversations/{KEY}/runs/{run['runId']}/wait", params={"timeout": 60}
            )
            assert done.json()["status"] == "completed", done.text
            state = await client.get(f"/v1/conversations/{KEY}/state")
            snapshot_bytes = len(state.content)
            # A snapshot of this run is what a gone subscriber must not build: large next to
            # the bound below, so building one cannot pass unseen.
            assert snapshot_bytes > 2**20, snapshot_bytes
            assert await metric(client, "agent_gateway_subscribers") == 1  # still stalled

            tracemalloc.start()
            try:
                stalled.close()

                async def gone() -> bool:
                    return await metric(client, "agent_gateway_subscribers") == 0

                await eventually_async(gone, within=15, what="the closed subscriber left")
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    finally:
        stalled.close()
    # What leaving allocated at its peak: bookkeeping and the /metrics polls, no state.
    assert peak < 2**19, f"{peak / 2**20:.2f} MiB allocated while the stalled subscriber left"


async def test_a_stalled_subscriber_that_reads_again_gets_a_snapshot_then_every_later_event(
    start_gateway: StartGateway,
) -> None:
    """It fell ~10x the log behind: it gets what it was sending, then a snapshot frame where
    the log resumes, then every later event once (no gap it is not told about, no repeat)."""
    provider = ScriptedProvider()
    settings = make_settings(
        gateway={
            "event_log_max_len": LOG_CAP,
            "send_timeout_seconds": 120,
            "heartbeat_seconds": 60,
        }
    )
    gw = await start_gateway(settings, providers={"demo": provider}, sndbuf=4096)
    sock = await stalled_client(gw.port, f"GET {EVENTS} HTTP/1.1\r\nHost: x\r\n\r\n")
    reader = _SseReader(sock)
    try:
        async with gw.client(timeout=30.0) as client:
            await reader.until(lambda frames: len(frames) >= 1)  # the first snapshot
            assert reader.frames[0]["event"] == "snapshot"
            run = await start_run(client, KEY, "text:3000 gate:go text:50")
            run_id = run["runId"]

            async def logged() -> bool:
                state = (await client.get(f"/v1/conversations/{KEY}/state")).json()
                return bool("w2999 " in _text_of(state))

            await eventually_async(logged, within=30, what="3000 deltas logged")
            await reader.until(lambda frames: any(f.get("event") == "snapshot" for f in frames[1:]))
            provider.gates["go"].set()
            await reader.until(_is_completed)
    finally:
        sock.close()

    frames = reader.frames[1:]
    resync = [i for i, frame in enumerate(frames) if frame.get("event") == "snapshot"]
    assert len(resync) == 1, f"snapshot frames at {resync}"
    before, snapshot_frame, after = frames[: resync[0]], frames[resync[0]], frames[resync[0] + 1 :]
    events_before = [e for e in map(_event, before) if e is not None]
    events_after = [e for e in map(_event, after) if e is not None]
    # What it got before falling behind: the run's first events, in order, none missing.
    assert events_before and {e["runId"] for e in events_before} == {run_id}
    assert [e["sequence"] for e in events_before] == list(range(len(events_before)))
    # Far behind: the snapshot is where the log resumes, well past what it had.
    snapshot = orjson.loads(snapshot_frame["data"])
    assert snapshot_frame["id"] == snapshot["cursor"]
    applied = _processed_sequences(snapshot, run_id)
    assert applied == set(range(max(applied) + 1))
    assert max(applied) >= len(events_before) + LOG_CAP
    # Then every later event once, in order, from right after the snapshot.
    sequences = [e["sequence"] for e in events_after]
    assert sequences == list(range(max(applied) + 1, max(applied) + 1 + len(sequences)))
    assert events_after[-1]["type"] == "run.completed"
    # The snapshot and the deltas after it make the whole answer.
    deltas = "".join(e["payload"]["delta"] for e in events_after if e["type"] == "message.delta")
    expected = "".join(f"w{i} " for i in range(3000)) + "".join(f"w{i} " for i in range(50))
    assert _text_of(snapshot) + deltas == expected


async def test_a_stalled_subscriber_whose_send_and_heartbeat_both_time_out_is_dropped(
    start_gateway: StartGateway,
) -> None:
    """Both the stream's send and a heartbeat's time out in one loop iteration (a busy loop):
    still one dropped subscriber, its connection aborted, not an error of the ASGI app."""
    settings = make_settings(gateway={"send_timeout_seconds": 1, "heartbeat_seconds": 0.05})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    stalled = await stalled_client(gw.port, f"GET {EVENTS} HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        async with gw.client() as client:
            await wait_metric(client, "agent_gateway_subscribers", 1)
            run = await start_run(client, KEY, "text:200:2000")  # far past both buffers
            done = await client.get(
                f"/v1/conversations/{KEY}/runs/{run['runId']}/wait", params={"timeout": 30}
            )
            assert done.json()["status"] == "completed", done.text
            # The stream's send and the heartbeats wait on the paused transport, each with
            # its timer: block the loop past both, as a busy gateway would.
            time.sleep(1.5)  # noqa: ASYNC251 - the point: both timers due in one iteration
            await wait_metric(client, "agent_gateway_dropped_subscribers_total", 1)
            assert await drained_to_eof(stalled, 5.0), "the dropped subscriber was not closed"
    finally:
        stalled.close()
