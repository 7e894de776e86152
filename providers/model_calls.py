"""Helpers shared by the model-API providers (OpenAI Chat, Anthropic Messages).

A gateway run may span several model calls (a tool round trip): usage is summed over them,
and ``run.completed`` carries the normalised usage with the raw upstream usage in ``meta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers.context import RunContext

__all__ = ["add_usage", "finish_run", "parse_arguments"]


def add_usage(
    total: Mapping[str, float | int] | None, usage: Mapping[str, float | int]
) -> dict[str, float | int]:
    merged = dict(total or {})
    for key, value in usage.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def parse_arguments(arguments: str) -> tuple[bool, Any]:
    """(ok, value) for a tool's accumulated argument text; empty text is ``{}``."""
    import orjson

    if not arguments.strip():
        return True, {}
    try:
        return True, orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False, None


def finish_run(ctx: RunContext, *, raw_usage: list[Any] | None = None) -> None:
    """Close what is open by the "flush" column; ``run.completed`` unless something waits.

    Like ``RunContext.finish`` but the raw upstream usage goes into ``meta`` (§10)."""
    if ctx.ended:
        return
    ctx.close_open("flush")
    if ctx.is_waiting():
        return
    payload: dict[str, Any] = {}
    if ctx.output is not None:
        payload["output"] = ctx.output
    if ctx.usage is not None:
        payload["usage"] = dict(ctx.usage)
    meta = {"usage": raw_usage} if raw_usage else None
    ctx.emit("run.completed", payload, meta=meta)
