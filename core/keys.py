"""State keys: ``entityKey(runId, id) = f"{len(runId)}:{runId}{id}"`` with JavaScript lengths.

``len`` is the UTF-16 code-unit length (``String.prototype.length``): an astral-plane character
such as an emoji counts 2, a lone surrogate counts 1.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["entity_key", "event_key", "run_key_prefix", "utf16_len"]


def utf16_len(text: str) -> int:
    """JavaScript's ``text.length``."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@lru_cache(maxsize=4096)
def run_key_prefix(run_id: str) -> str:
    """The ``"{len}:{runId}"`` prefix shared by every key of a run."""
    return f"{utf16_len(run_id)}:{run_id}"


def entity_key(run_id: str, entity_id: str) -> str:
    """Key of an entity in the state's entity maps (same id in two runs never collides)."""
    return run_key_prefix(run_id) + entity_id


def event_key(run_id: str, event_id: str) -> str:
    """Idempotency key of an event in ``processedEventIds``."""
    return run_key_prefix(run_id) + event_id
