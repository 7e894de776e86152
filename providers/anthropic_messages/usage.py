"""Anthropic usage → the gateway's normalised usage (protocol.md §10).

Anthropic's ``input_tokens`` excludes cache reads and writes; the normalised ``inputTokens``
counts every prompt token (as OpenAI's ``prompt_tokens`` does) and ``cachedInputTokens`` is the
cache-read part of it. ``message_delta`` usage is cumulative and supersedes ``message_start``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["merge_anthropic_usage", "normalise_anthropic_usage"]


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def merge_anthropic_usage(
    current: Mapping[str, Any] | None, update: Mapping[str, Any]
) -> dict[str, Any]:
    """Keys present in ``update`` (a later event) win over ``current``."""
    merged = dict(current or {})
    for key, value in update.items():
        if value is not None:
            merged[key] = value
    return merged


def normalise_anthropic_usage(raw: Mapping[str, Any]) -> dict[str, float | int]:
    base = _number(raw.get("input_tokens")) or 0
    cache_read = _number(raw.get("cache_read_input_tokens")) or 0
    cache_write = _number(raw.get("cache_creation_input_tokens")) or 0
    output = _number(raw.get("output_tokens")) or 0
    usage: dict[str, float | int] = {
        "inputTokens": base + cache_read + cache_write,
        "outputTokens": output,
    }
    usage["totalTokens"] = usage["inputTokens"] + output
    details = raw.get("output_tokens_details")
    if isinstance(details, Mapping):
        thinking = _number(details.get("thinking_tokens"))
        if thinking is None:
            thinking = _number(details.get("reasoning_tokens"))
        if thinking is not None:
            usage["reasoningTokens"] = thinking
    if "cache_read_input_tokens" in raw and _number(raw.get("cache_read_input_tokens")) is not None:
        usage["cachedInputTokens"] = cache_read
    return usage
