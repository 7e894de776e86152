"""The ``anthropic-messages`` provider: the Anthropic Messages API over SSE."""

from providers.anthropic_messages.provider import ANTHROPIC_VERSION, AnthropicMessagesProvider
from providers.anthropic_messages.request import build_messages_request
from providers.anthropic_messages.usage import normalise_anthropic_usage
from providers.registry import register_kind

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicMessagesProvider",
    "build_messages_request",
    "normalise_anthropic_usage",
]


register_kind("anthropic-messages", AnthropicMessagesProvider.from_config)
