"""The ``openai-responses`` provider: the OpenAI Responses API over SSE, used statelessly."""

from providers.openai_responses.events import decode_event
from providers.openai_responses.provider import OpenAIResponsesProvider
from providers.openai_responses.request import build_responses_request, history_to_input
from providers.openai_responses.usage import normalise_responses_usage
from providers.registry import register_kind

__all__ = [
    "OpenAIResponsesProvider",
    "build_responses_request",
    "decode_event",
    "history_to_input",
    "normalise_responses_usage",
]


register_kind("openai-responses", OpenAIResponsesProvider.from_config)
