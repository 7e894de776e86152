"""The ``openai-chat`` provider: OpenAI-compatible Chat Completions over SSE."""

from providers.openai_chat.chunks import ChatChunk, decode_chunk
from providers.openai_chat.provider import OpenAIChatProvider
from providers.openai_chat.request import build_chat_request
from providers.openai_chat.usage import normalise_openai_usage
from providers.registry import register_kind

__all__ = [
    "ChatChunk",
    "OpenAIChatProvider",
    "build_chat_request",
    "decode_chunk",
    "normalise_openai_usage",
]


register_kind("openai-chat", OpenAIChatProvider.from_config)
