"""The ``openai-chat`` provider: OpenAI-compatible Chat Completions over SSE."""

from collections.abc import Mapping
from typing import Any

from providers.openai_chat.chunks import ChatChunk, decode_chunk
from providers.openai_chat.provider import OpenAIChatProvider
from providers.openai_chat.request import build_chat_request
from providers.openai_chat.usage import normalise_openai_usage
from providers.registry import network_transport, register_kind

__all__ = [
    "ChatChunk",
    "OpenAIChatProvider",
    "build_chat_request",
    "decode_chunk",
    "normalise_openai_usage",
]


def _create(name: str, config: Mapping[str, Any]) -> OpenAIChatProvider:
    return OpenAIChatProvider(
        name,
        url=str(config.get("url") or ""),
        model=config.get("model"),
        headers=config.get("headers") or {},
        params=config.get("params") or {},
        transport=network_transport(config),
        max_event_bytes=config.get("max_upstream_event_bytes"),
    )


register_kind("openai-chat", _create)
