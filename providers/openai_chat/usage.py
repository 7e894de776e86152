"""OpenAI-compatible usage → the gateway's normalised usage (protocol.md §10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["find_openai_usage", "normalise_openai_usage"]


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def find_openai_usage(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The usage object of a chunk: top-level ``usage``, else Groq's ``x_groq.usage``."""
    usage = chunk.get("usage")
    if type(usage) is dict or isinstance(usage, Mapping):
        return usage
    x_groq = chunk.get("x_groq")
    if x_groq is None:
        return None
    if isinstance(x_groq, Mapping) and isinstance(x_groq.get("usage"), Mapping):
        groq_usage: Mapping[str, Any] = x_groq["usage"]
        return groq_usage
    return None


def normalise_openai_usage(raw: Mapping[str, Any]) -> dict[str, float | int]:
    """``prompt_tokens`` already includes cached tokens; reasoning is part of completion."""
    usage: dict[str, float | int] = {}
    prompt = _number(raw.get("prompt_tokens"))
    completion = _number(raw.get("completion_tokens"))
    usage["inputTokens"] = prompt if prompt is not None else 0
    usage["outputTokens"] = completion if completion is not None else 0
    total = _number(raw.get("total_tokens"))
    usage["totalTokens"] = (
        total if total is not None else usage["inputTokens"] + usage["outputTokens"]
    )
    details = raw.get("completion_tokens_details")
    if isinstance(details, Mapping):
        reasoning = _number(details.get("reasoning_tokens"))
        if reasoning is not None:
            usage["reasoningTokens"] = reasoning
    prompt_details = raw.get("prompt_tokens_details")
    cached = None
    if isinstance(prompt_details, Mapping):
        cached = _number(prompt_details.get("cached_tokens"))
    if cached is None:
        cached = _number(raw.get("prompt_cache_hit_tokens"))
    if cached is not None:
        usage["cachedInputTokens"] = cached
    return usage
