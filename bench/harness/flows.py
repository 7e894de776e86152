"""The request shapes the benches send: a gateway run, a baseline call, a subscription."""

from __future__ import annotations

import asyncio
import itertools

import orjson

from bench.harness.client import StreamResult, read_stream
from bench.harness.mock_upstream import prompt

__all__ = [
    "baseline_body",
    "gateway_run",
    "gateway_run_body",
    "new_key",
    "stream_baseline",
]

_keys = itertools.count(1)


def new_key(prefix: str = "bench") -> str:
    return f"{prefix}-{next(_keys)}-{id(_keys) % 10000}"


def gateway_run_body(
    n: int, delay_ms: float = 0, tag: str = "", provider: str = "bench", burst: int | None = None
) -> bytes:
    return orjson.dumps(
        {"input": {"prompt": prompt(n, delay_ms, tag, burst)}, "provider": provider}
    )


def baseline_body(n: int, delay_ms: float = 0, tag: str = "", burst: int | None = None) -> bytes:
    return orjson.dumps(
        {
            "model": "bench",
            "stream": True,
            "messages": [{"role": "user", "content": prompt(n, delay_ms, tag, burst)}],
        }
    )


async def gateway_run(
    port: int,
    n: int,
    delay_ms: float = 0,
    *,
    key: str | None = None,
    provider: str = "bench",
    burst: int | None = None,
) -> StreamResult:
    """``POST …/runs?stream=true``: the run's events until its terminal event."""
    key = key or new_key()
    return await read_stream(
        port,
        "POST",
        f"/v1/conversations/{key}/runs?stream=true",
        gateway_run_body(n, delay_ms, provider=provider, burst=burst),
    )


async def stream_baseline(
    port: int, route: str, n: int, delay_ms: float = 0, *, burst: int | None = None
) -> StreamResult:
    """``/relay`` or ``/normalize``: read the whole response."""
    return await read_stream(
        port, "POST", route, baseline_body(n, delay_ms, burst=burst), stop_at_terminal=False
    )


def run_sync(coro: object) -> object:  # pragma: no cover - convenience for scripts
    import uvloop

    return uvloop.run(coro)  # type: ignore[arg-type]


_ = asyncio
