"""Decode one Responses API SSE event into its JSON object (no gateway events yet).

Every event carries its ``type`` in the JSON (``event:`` repeats it; servers that send only
``data:`` lines are read the same way). A ``[DONE]`` payload, which the Responses API does not
document but the SDKs, mocks and compatible servers send, decodes to ``None``. An ``error``
event raises :class:`UpstreamError` in both recorded shapes: flat (``code``/``message``) and
nested (``error: {type, code, message, param}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from providers.errors import UpstreamError, UpstreamMalformedChunk

__all__ = ["decode_event", "upstream_error"]

_ERROR_FIELDS = ("code", "type", "param")


def _data(chunk: Any) -> str:
    data = getattr(chunk, "data", chunk)
    if isinstance(data, bytes):
        return data.decode("utf-8")
    if not isinstance(data, str):
        raise TypeError(f"unexpected upstream chunk {type(chunk).__name__}")
    return data


def upstream_error(error: Any, fallback: str = "The upstream reported an error.") -> UpstreamError:
    """The run failure for an upstream error object; its own code and type go into details."""
    if not isinstance(error, Mapping):
        return UpstreamError(error if isinstance(error, str) and error else fallback)
    message = error.get("message")
    details = {k: error[k] for k in _ERROR_FIELDS if error.get(k) is not None}
    return UpstreamError(
        message if isinstance(message, str) and message else fallback, details=details or None
    )


def decode_event(chunk: Any) -> Mapping[str, Any] | None:
    """The event's JSON object; ``None`` for ``[DONE]``; raises on ``error`` and bad JSON."""
    data = _data(chunk)
    if data.strip() == "[DONE]":
        return None
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamMalformedChunk("The upstream sent an event that is not JSON.") from None
    if not isinstance(payload, dict):
        raise UpstreamMalformedChunk("The upstream sent an event that is not a JSON object.")
    name = getattr(chunk, "event", None)
    if "type" not in payload and isinstance(name, str) and name != "message":
        payload["type"] = name
    if payload.get("type") == "error":
        nested = payload.get("error")
        raise upstream_error(nested if isinstance(nested, Mapping) else payload)
    return payload
