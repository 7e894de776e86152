"""The serving process's garbage-collector policy: freeze what start-up built, collect less often.

A started gateway holds a large number of GC-tracked objects (FastAPI, pydantic, prometheus,
its providers) that live as long as the process. Left in the collected generations, every full
collection walks them again, and a long stream triggers full and many young collections: a
large share of the gateway's CPU per event (the figures: BENCHMARKS.md, "Costs behind the
code's shortcuts"). ``gc.freeze()`` after start-up moves them to the permanent generation
(never walked; they still die by reference count), and a larger young-generation threshold runs
the young collection once per 5,000 net allocations of tracked objects instead of CPython's 700.

A full collection still walks what the conversations and streams hold, and stops the loop
while it does (every subscriber's next delta waits for it); under load one came every few
seconds (CPython considers one after 10 collections of the middle generation).
``OLD_THRESHOLD`` makes it 100, which removed the capacity steps over the p99 bound that those
pauses caused (same section). Finished runs and streams leave no cyclic garbage
(``tests/app/test_no_cyclic_garbage.py``), so what waits longer for a full collection is little.

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
