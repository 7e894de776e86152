"""The events of one run as the run context keeps them: consecutive text deltas merged.

A run context keeps its own events so a continuation can send the upstream this run's
messages and tool results so far (``RunContext.history``). Kept one by one, a long answer
costs one event dict per delta for the whole run (tens of MB for 50,000 deltas). Here
consecutive string deltas of one entity (``message.delta``, ``reasoning.delta``,
``tool.arguments_delta`` with nothing but the id and the delta in the payload) are kept as
their text only and read back as one merged delta event, which the reducer folds to the same
state: the same text, the last delta's ``eventId`` and ``sequence``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from providers.contract import AgentEvent

__all__ = ["RunEventLog"]

#: Delta event type -> the payload field naming its entity.
DELTA_IDS: dict[str, str] = {
    "message.delta": "messageId",
    "reasoning.delta": "reasoningId",
    "tool.arguments_delta": "toolCallId",
}


_ABSENT: Any = object()
#: The kept text of an open delta group is joined every this many deltas.
MERGE_EVERY = 64


def _delta_key(event: AgentEvent) -> tuple[str, Any] | None:
    field = DELTA_IDS.get(event["type"])
    if field is None:
        return None
    payload = event["payload"]
    if len(payload) != 2 or not isinstance(payload.get("delta"), str) or field not in payload:
        return None
    return event["type"], payload[field]


class RunEventLog:
    """An append-only sequence of events; iterating yields them with delta runs merged."""

    __slots__ = ("_chunks", "_events", "_head", "_head_meta", "_key", "_last", "_loose", "_size")

    def __init__(self) -> None:
        self._events: list[AgentEvent] = []
        self._key: tuple[str, Any] | None = None
        self._head: AgentEvent | None = None  # first delta of the open group
        self._head_meta: Any = None  # its meta (None when absent)
        self._last: AgentEvent | None = None  # last delta of the open group
        self._chunks: list[str] = []
        self._loose = 0  # deltas appended to _chunks since its last merge
        self._size = 0

    def append(self, event: AgentEvent) -> None:
        self._size += 1
        group = self._key
        if group is not None and event["type"] == group[0]:
            # The next delta of the open group (inlined _delta_key and _add: this runs per
            # streamed delta).
            payload = event["payload"]
            delta = payload.get("delta")
            if (
                isinstance(delta, str)
                and len(payload) == 2
                and payload.get(DELTA_IDS[group[0]], _ABSENT) == group[1]
                and event.get("meta") == self._head_meta
            ):
                self._last = event
                chunks = self._chunks
                chunks.append(delta)
                self._loose += 1
                if self._loose == MERGE_EVERY:
                    self._merge_loose()
                return
        key = _delta_key(event)
        if key is not None and key == self._key and event.get("meta") == self._head_meta:
            self._add(event["payload"]["delta"])
            self._last = event
            return
        self._close()
        if key is None:
            self._events.append(event)
            return
        self._key, self._head, self._last = key, event, event
        self._head_meta = event.get("meta")
        self._chunks = [event["payload"]["delta"]]
        self._loose = 1

    def _add(self, delta: str) -> None:
        self._chunks.append(delta)
        self._loose += 1
        if self._loose == MERGE_EVERY:
            self._merge_loose()

    def _merge_loose(self) -> None:
        # The last MERGE_EVERY deltas become one string (earlier merged ones stay as they are:
        # O(1) per delta): short deltas kept one by one cost several times the memory of
        # merged ones (BENCHMARKS.md, "Costs behind the code's shortcuts").
        chunks = self._chunks
        chunks[-MERGE_EVERY:] = ["".join(chunks[-MERGE_EVERY:])]
        self._loose = 0

    def _merged(self) -> AgentEvent | None:
        head, last = self._head, self._last
        if head is None or last is None:
            return None
        if head is last:
            return head
        payload = {**head["payload"], "delta": "".join(self._chunks)}
        return {**last, "payload": payload}

    def _close(self) -> None:
        merged = self._merged()
        if merged is not None:
            self._events.append(merged)
        self._key = self._head = self._last = self._head_meta = None
        self._chunks = []
        self._loose = 0

    def __iter__(self) -> Iterator[AgentEvent]:
        yield from self._events
        merged = self._merged()
        if merged is not None:
            yield merged

    def __len__(self) -> int:
        """How many events were appended (not how many are kept)."""
        return self._size
