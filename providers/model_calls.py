"""Helpers shared by the model-API providers (OpenAI Chat, Anthropic Messages).

A gateway run may span several model calls (a tool round trip): usage is summed over them,
and ``run.completed`` carries the normalised usage with the raw upstream usage in ``meta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypedDict

import orjson

from providers.base import ProviderBase, standard_capabilities
from providers.context import RunContext
from providers.contract import AgentTransport
from providers.registry import network_transport
from providers.transports.sse import SSETransport

__all__ = [
    "ModelApiConfig",
    "ModelApiProvider",
    "add_usage",
    "content_text",
    "finish_run",
    "parse_arguments",
]


class ModelApiConfig(TypedDict, total=False):
    url: str
    model: str | None
    headers: Mapping[str, str] | None
    params: Mapping[str, Any] | None
    transport: AgentTransport | None
    max_event_bytes: int | None


class ModelApiProvider(ProviderBase):
    """The configuration every model-API provider takes (endpoint, model, headers, params)."""

    def __init__(
        self,
        id: str,
        *,
        url: str = "",
        model: str | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        transport: AgentTransport | None = None,
        max_event_bytes: int | None = None,
    ) -> None:
        transport = transport or SSETransport()
        super().__init__(id, transport, standard_capabilities([transport.kind]))
        self.url = url
        self.model = model
        self.headers = dict(headers or {})
        self.params = dict(params or {})
        self.max_event_bytes = max_event_bytes

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> Self:
        """Build the provider from its ``[providers.NAME]`` table (the registry's factory)."""
        return cls(
            name,
            url=str(config.get("url") or ""),
            model=config.get("model"),
            headers=config.get("headers") or {},
            params=config.get("params") or {},
            transport=network_transport(config),
            max_event_bytes=config.get("max_upstream_event_bytes"),
        )


def content_text(content: Any) -> str:
    """The text of AgentMessageContent (text parts joined); other values as JSON text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return orjson.dumps(content).decode()


def add_usage(
    total: Mapping[str, float | int] | None, usage: Mapping[str, float | int]
) -> dict[str, float | int]:
    merged = dict(total or {})
    for key, value in usage.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def parse_arguments(arguments: str) -> tuple[bool, Any]:
    """(ok, value) for a tool's accumulated argument text; empty text is ``{}``."""
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
