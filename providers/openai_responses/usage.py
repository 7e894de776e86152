"""Responses API usage → the gateway's normalised usage (protocol.md §10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["normalise_responses_usage"]


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _detail(raw: Mapping[str, Any], group: str, key: str) -> float | int | None:
    details = raw.get(group)
    return _number(details.get(key)) if isinstance(details, Mapping) else None


def normalise_responses_usage(raw: Mapping[str, Any]) -> dict[str, float | int]:
    """``input_tokens`` already includes the cached tokens; reasoning is part of the output."""
    inputs = _number(raw.get("input_tokens"))
    outputs = _number(raw.get("output_tokens"))
    usage: dict[str, float | int] = {
        "inputTokens": inputs if inputs is not None else 0,
        "outputTokens": outputs if outputs is not None else 0,
    }
    total = _number(raw.get("total_tokens"))
    if total is None:
        total = usage["inputTokens"] + usage["outputTokens"]
    usage["totalTokens"] = total
    reasoning = _detail(raw, "output_tokens_details", "reasoning_tokens")
    if reasoning is not None:
        usage["reasoningTokens"] = reasoning
    cached = _detail(raw, "input_tokens_details", "cached_tokens")
    if cached is not None:
        usage["cachedInputTokens"] = cached
    return usage
