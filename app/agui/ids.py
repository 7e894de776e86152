"""AG-UI ids of gateway entities: unique within the thread, and mapped back without state.

Gateway entity ids repeat across runs (``approval-1``, a fixed upstream tool id), AG-UI ids
must not: the AG-UI id is the entity key of protocol.md §3 (``len(runId):runId`` + id), which
names the run and the entity and can be read back from the id a client returns.
"""

from __future__ import annotations

from core.keys import entity_key

__all__ = ["agui_id", "parse_agui_id"]


def agui_id(run_id: str, entity_id: str) -> str:
    return entity_key(run_id, entity_id)


def parse_agui_id(value: str) -> tuple[str, str] | None:
    """``(runId, entityId)`` of an id made by :func:`agui_id`; None for any other string."""
    head, sep, rest = value.partition(":")
    if not sep or not head.isdigit():
        return None
    size = int(head)
    # entity_key counts UTF-16 code units (JavaScript's length); run ids are ASCII tokens.
    if size <= 0 or size >= len(rest):
        return None
    return rest[:size], rest[size:]
