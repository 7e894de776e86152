"""Fixture replay transport: a recorded chunk file replayed as an upstream stream.

Formats (``fmt``): ``"sse"`` — raw SSE text, yields ``httpx_sse.ServerSentEvent`` like the SSE
transport; ``"jsonl"`` — one JSON value per line, yields the parsed values (blank lines skipped);
``"auto"`` — ``.jsonl``/``.ndjson``/``.json`` files are JSON lines, anything else SSE.

Recorded timing (``timed=True``, JSON lines only): each line is ``{"atMs": <ms since start>,
"chunk": <value>}`` and the replay sleeps until each chunk's time (scaled by ``speed``). The
request handed to ``open`` is ignored, or may be a path overriding the configured one. The
file is read when ``open`` is called; sleeps end at once on abort.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import orjson

from providers.errors import AbortError, UpstreamMalformedChunk
from providers.signal import AbortSignal
from providers.transports.request import DEFAULT_MAX_EVENT_BYTES
from providers.transports.sse import SSEParser

__all__ = ["ReplayTransport", "abortable_sleep"]

ReplayFormat = Literal["auto", "sse", "jsonl"]


async def abortable_sleep(seconds: float, signal: AbortSignal) -> None:
    """Sleep, waking at once (with :class:`AbortError`) if ``signal`` aborts."""
    if signal.aborted:
        raise AbortError.from_signal(signal)
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(*_args: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    handle = loop.call_later(seconds, wake)
    remove = signal.add_callback(wake)
    try:
        await waiter
    finally:
        handle.cancel()
        remove()
    if signal.aborted:
        raise AbortError.from_signal(signal)


class ReplayTransport:
    def __init__(
        self,
        path: str | Path | None = None,
        *,
        text: str | None = None,
        fmt: ReplayFormat = "auto",
        timed: bool = False,
        speed: float = 1.0,
        kind: str = "async-iterable",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if path is None and text is None:
            raise ValueError("ReplayTransport needs a path or text.")
        self.kind = kind
        self.path = Path(path) if path is not None else None
        self.text = text
        self.fmt = fmt
        self.timed = timed
        self.speed = speed
        self.max_event_bytes = max_event_bytes

    async def aclose(self) -> None:
        return None

    def _format(self, path: Path | None) -> Literal["sse", "jsonl"]:
        if self.fmt != "auto":
            return self.fmt
        if path is not None and path.suffix in {".jsonl", ".ndjson", ".json"}:
            return "jsonl"
        return "sse"

    async def open(self, request: Any, signal: AbortSignal) -> AsyncIterator[Any]:
        if signal.aborted:
            raise AbortError.from_signal(signal)
        path = Path(request) if isinstance(request, str | Path) else self.path
        text = path.read_text(encoding="utf-8") if path is not None else (self.text or "")
        if self._format(path) == "sse":
            parser = SSEParser(self.max_event_bytes)
            for event in [*parser.feed(text), *parser.close()]:
                await abortable_sleep(0, signal)
                yield event
            return
        started = time.monotonic()
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise UpstreamMalformedChunk(
                    f"Line {number} of the recording is not JSON."
                ) from None
            if self.timed and isinstance(value, dict) and "chunk" in value:
                at = float(value.get("atMs", 0)) / 1000.0 / max(self.speed, 1e-9)
                await abortable_sleep(at - (time.monotonic() - started), signal)
                value = value["chunk"]
            else:
                await abortable_sleep(0, signal)
            yield value
