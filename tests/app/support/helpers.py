"""Small client-side helpers of the app tests (httpx + httpx-sse)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse
from prometheus_client.parser import text_string_to_metric_families

from app.backends import ConversationRef, MemoryBackend

__all__ = [
    "collect_sse",
    "drained_to_eof",
    "events_of",
    "metric",
    "metric_sample",
    "stalled_client",
    "start_run",
    "terminal",
    "wait_metric",
    "wait_state",
]


async def start_run(
    client: httpx.AsyncClient, key: str, prompt: str, **body: Any
) -> dict[str, Any]:
    response = await client.post(
        f"/v1/conversations/{key}/runs", json={"input": {"prompt": prompt}, **body}
    )
    assert response.status_code == 202, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def wait_state(
    client: httpx.AsyncClient,
    key: str,
    predicate: Callable[[dict[str, Any]], bool],
    within: float = 10.0,
) -> dict[str, Any]:
    """Poll ``GET …/state`` until ``predicate(snapshot)`` holds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        response = await client.get(f"/v1/conversations/{key}/state")
        if response.status_code == 200:
            body: dict[str, Any] = response.json()
            if predicate(body):
                return body
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"state of {key} never matched: {response.text[:500]}")
        await asyncio.sleep(0.02)


async def collect_sse(
    client: httpx.AsyncClient,
    path: str,
    *,
    method: str = "GET",
    stop: Callable[[list[ServerSentEvent]], bool] | None = None,
    first_frame: asyncio.Event | None = None,
    **kwargs: Any,
) -> list[ServerSentEvent]:
    """Read SSE frames (comments and retry-only frames excluded) until the end or ``stop``.

    ``first_frame`` is set when the first frame arrived: for a stream that starts with a
    snapshot, from then on it follows the log and misses nothing appended later."""
    frames: list[ServerSentEvent] = []
    async with aconnect_sse(client, method, path, **kwargs) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            if not sse.data and sse.event == "message":
                continue
            frames.append(sse)
            if first_frame is not None:
                first_frame.set()
            if stop is not None and stop(frames):
                break
    return frames


async def metric_sample(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    """One sample of the gateway's ``/metrics``, by name and exactly these labels (0 when
    absent)."""
    text = (await client.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


async def metric(client: httpx.AsyncClient, name: str, transport: str = "sse") -> float:
    """The value of the gateway's per-transport sample ``name`` (read from ``/metrics``)."""
    return await metric_sample(client, name, transport=transport)


async def wait_metric(
    client: httpx.AsyncClient,
    name: str,
    at_least: float,
    transport: str = "sse",
    within: float = 15.0,
) -> None:
    """Wait until the per-transport sample ``name`` reaches ``at_least`` (e.g. subscribers
    following, subscribers dropped)."""
    deadline = asyncio.get_running_loop().time() + within
    while (value := await metric(client, name, transport)) < at_least:
        assert asyncio.get_running_loop().time() < deadline, f"{name} stayed at {value}"
        await asyncio.sleep(0.02)


def events_of(frames: list[ServerSentEvent]) -> list[dict[str, Any]]:
    return [orjson.loads(f.data) for f in frames if f.event == "message"]


def terminal(frames: list[ServerSentEvent]) -> bool:
    """The last frame is a run terminal event (a ``stop`` for :func:`collect_sse`)."""
    last = frames[-1]
    ends = ("run.completed", "run.failed", "run.cancelled")
    return last.event == "message" and orjson.loads(last.data)["type"] in ends


async def stalled_client(port: int, request: str) -> socket.socket:
    """A raw client that sends ``request`` and never reads (tiny receive buffer)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request.encode())
    return sock


async def drained_to_eof(sock: socket.socket, within: float) -> bool:
    """Read ``sock`` until the server closed it (True) or ``within`` seconds passed (False)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            while await loop.sock_recv(sock, 65536):
                pass
            return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


class SoonMemoryBackend(MemoryBackend):
    """Its writes start without waiting (as Redis's do): the outcome comes from a task."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: set[asyncio.Future[None]] = set()

    def append_soon(self, ref: ConversationRef, items: Any, done: Any) -> bool:
        async def write() -> None:
            try:
                entries = await self.append_batch(ref, items)
            except Exception as exc:
                done(None, exc)
            else:
                done(entries, None)

        self.writes.add(asyncio.ensure_future(write()))
        return True
