"""Redis appends (``app.backends.redis.appends``): what an appended entry keeps in memory."""

from __future__ import annotations

import tracemalloc

import orjson

from app.backends.redis.appends import _pending
from app.backends.redis.eventlog import KIND_EVENT, KIND_EXTENSION
from app.backends.types import LogItem


def _retained_per_item(items: list[LogItem]) -> tuple[float, list[object]]:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept: list[object] = [_pending(item) for item in items]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return grown / len(items), kept


def test_an_entry_keeps_its_json_in_a_right_sized_buffer() -> None:
    """The JSON of an appended event stays in the conversation's reader window (as the entry's
    ``data``, up to 1,024 entries per conversation). ``orjson.dumps`` answers on a >= 4 KiB
    buffer: kept as it is, every windowed delta pinned ~4 KiB (a C = 200 capacity step grew
    the gateway by ~190 MB); the entry keeps a copy of its own size."""
    events = [
        {
            "type": "text.delta",
            "sessionId": "s-1",
            "runId": "r-1",
            "messageId": "m-1",
            "delta": f"token {n}",
            "eventId": f"e-{n}",
        }
        for n in range(300)
    ]
    per_item, kept = _retained_per_item([LogItem.of_event(event) for event in events])
    assert per_item < 1024, f"{per_item:.0f} bytes kept per entry"
    for pending, event in zip(kept, events, strict=True):
        assert pending[0] == KIND_EVENT  # type: ignore[index]
        assert orjson.loads(pending[1]) == event  # type: ignore[index]
        assert pending[2:] == ("text.delta", "r-1")  # type: ignore[index]


def test_an_extension_entry_keeps_its_json_in_a_right_sized_buffer() -> None:
    items = [LogItem.of_extension(f"k{n}", {"n": n}) for n in range(300)]
    per_item, kept = _retained_per_item(items)
    assert per_item < 1024, f"{per_item:.0f} bytes kept per entry"
    assert kept[7][0] == KIND_EXTENSION  # type: ignore[index]
    assert orjson.loads(kept[7][1]) == {"key": "k7", "value": {"n": 7}}  # type: ignore[index]
