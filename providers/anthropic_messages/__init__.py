"""The ``anthropic-messages`` provider: the Anthropic Messages API over SSE."""

from collections.abc import Mapping
from typing import Any

from providers.anthropic_messages.provider import ANTHROPIC_VERSION, AnthropicMessagesProvider
from providers.anthropic_messages.request import build_messages_request
from providers.anthropic_messages.usage import normalise_anthropic_usage
from providers.registry import network_transport, register_kind

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicMessagesProvider",
    "build_messages_request",
    "normalise_anthropic_usage",
]


def _create(name: str, config: Mapping[str, Any]) -> AnthropicMessagesProvider:
    return AnthropicMessagesProvider(
        name,
        url=str(config.get("url") or ""),
        model=config.get("model"),
        headers=config.get("headers") or {},
        params=config.get("params") or {},
        transport=network_transport(config),
        max_event_bytes=config.get("max_upstream_event_bytes"),
    )


register_kind("anthropic-messages", _create)
