"""The serving process's garbage-collector policy: freeze what start-up built, collect less often.

A started gateway holds ~150,000 GC-tracked objects (FastAPI, pydantic, prometheus, its
providers) that live as long as the process. Left in the collected generations, every full
collection walks them again: one stream of 20,000 events triggered about one full collection
(~90 ms) and ~150 young ones, about a quarter of the gateway's CPU per event. ``gc.freeze()``
after start-up moves them to the permanent generation (never walked; they still die by
reference count), and a larger young-generation threshold runs the young collection once per
5,000 net allocations of tracked objects instead of 700 (an event nets ~5).

A full collection still walks what the conversations and streams hold, and stops the loop
while it does: 154-176 ms on this 2-core VM with 200-400 answers streaming (every subscriber's
next delta waits for it). Under that load one came every few seconds (CPython considers one
after 10 collections of the middle generation). ``OLD_THRESHOLD`` makes it 100: at C = 200 on
Redis, 16 alternated capacity steps each had 0 steps over 100 ms p99 against 6. Finished runs
and streams leave no cyclic garbage (``tests/app/test_no_cyclic_garbage.py``), so what waits
longer for a full collection is little.

Only for a server that owns its process (``agent-gateway serve``, the bench's servers): an
in-process test server leaves the collector as it is.
"""

from __future__ import annotations

import gc

__all__ = ["OLD_THRESHOLD", "YOUNG_THRESHOLD", "tune_for_serving"]

#: Net allocations of tracked objects between two young collections (CPython's default: 700).
YOUNG_THRESHOLD = 5000
#: Collections of the middle generation before a full one is considered (CPython's: 10; it
#: also waits until the oldest generation has grown by a quarter since the last one).
OLD_THRESHOLD = 100


def tune_for_serving() -> None:
    """Collect once, freeze the survivors, raise the young and old thresholds (call after
    start-up)."""
    gc.collect()
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, OLD_THRESHOLD)
