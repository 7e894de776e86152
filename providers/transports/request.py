"""The request handed to the network transports (SSE, WebSocket)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "UpstreamRequest"]

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One upstream call: ``POST url`` with ``json`` (SSE) or ``json`` as the first frame (WS).

    ``headers`` may hold credentials: they go on the wire only, never into logs or errors
    (``repr`` hides them).
    """

    url: str
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    method: str = "POST"
    #: Largest single upstream event (an SSE event's data, a WS frame) accepted.
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
