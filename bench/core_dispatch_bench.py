"""Micro-bench of the reducer's hot path: CPU per streamed delta through ``AgentStore.dispatch``.

One run streams ``--deltas`` text deltas into one open entity (issue 16's 20,000-chunk stream).
Prints µs of CPU (``time.process_time``) per event, best of ``--rounds`` fresh stores, for:

- ``validated``: ``dispatch(event, validated=True)`` (the runner has checked the event);
- ``checked``: ``dispatch(event)`` (the store validates the event itself, protocol.md §6);
- ``snapshot``: one ``get_snapshot()`` after the stream (µs for the whole snapshot);
- ``resnap``: one more delta, then ``get_snapshot()`` again (µs for that snapshot);

for ``message.delta`` and, with ``--all``, ``reasoning.delta`` and ``tool.arguments_delta``.
The prebuilt input events are frozen out of the collector's way (``gc.freeze``).

Run: ``nice -n 19 .venv/bin/python bench/core_dispatch_bench.py [--deltas 20000] [--rounds 9]``
(A/B: the same command with ``PYTHONPATH`` pointing at the other tree).
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

from core import AgentStore, EventFactory

#: delta event type -> (start type, payload id field, start payload extras, end type)
_STREAMS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "message.delta": ("message.started", "messageId", {"role": "assistant"}, "message.completed"),
    "reasoning.delta": ("reasoning.started", "reasoningId", {}, "reasoning.completed"),
    "tool.arguments_delta": ("tool.requested", "toolCallId", {"name": "search"}, "tool.completed"),
}


def stream(delta_type: str, deltas: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(head events, delta events) of one run streaming ``deltas`` chunks into one entity."""
    start_type, id_field, extras, _end = _STREAMS[delta_type]
    factory = EventFactory("ses_bench", "run_bench")
    head = [
        factory.create("session.started", {"title": "bench"}),
        factory.create("run.started", {"input": {"prompt": "hi"}}),
        factory.create(start_type, {id_field: "e1", **extras}),
    ]
    body = [
        factory.create(delta_type, {id_field: "e1", "delta": f"tok{i % 97} "})
        for i in range(deltas)
    ]
    return head, body


def measure(
    head: list[dict[str, Any]], body: list[dict[str, Any]], *, validated: bool
) -> tuple[float, float, float]:
    """CPU seconds of one fresh store for: the deltas but the last, the snapshot after them,
    the snapshot after the last delta."""
    *body, extra = body
    store = AgentStore()
    for event in head:
        store.dispatch(event)
    dispatch = store.dispatch
    started = time.process_time()
    if validated:
        for event in body:
            dispatch(event, validated=True)
    else:
        for event in body:
            dispatch(event)
    streamed = time.process_time() - started
    started = time.process_time()
    snapshot = store.get_snapshot()
    snapped = time.process_time() - started
    dispatch(extra, validated=validated)
    started = time.process_time()
    again = store.get_snapshot()
    resnapped = time.process_time() - started
    assert store.issue_count == 0, store.issues()[:3]
    assert len(snapshot["processedEventIds"]) == len(head) + len(body)
    assert len(again["processedEventIds"]) == len(head) + len(body) + 1
    return streamed, snapped, resnapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--all", action="store_true", help="also reasoning and tool deltas")
    args = parser.parse_args()
    types = list(_STREAMS) if args.all else ["message.delta"]
    for delta_type in types:
        head, body = stream(delta_type, args.deltas)
        gc.collect()
        gc.freeze()  # the prebuilt input is not the store's
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for validated in (True, False):
                streamed, snapped, resnapped = measure(head, body, validated=validated)
                name = "validated" if validated else "checked"
                best[name] = min(best.get(name, float("inf")), streamed)
                best["snapshot"] = min(best.get("snapshot", float("inf")), snapped)
                best["resnap"] = min(best.get("resnap", float("inf")), resnapped)
        gc.unfreeze()
        n = len(body) - 1
        print(
            f"{delta_type:22s} validated {best['validated'] / n * 1e6:6.3f} µs/event   "
            f"checked {best['checked'] / n * 1e6:6.3f} µs/event   "
            f"snapshot {best['snapshot'] * 1e6:8.1f} µs   resnap {best['resnap'] * 1e6:8.1f} µs"
        )


if __name__ == "__main__":
    main()
