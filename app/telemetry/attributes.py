"""Span attribute names (OpenTelemetry GenAI semantic conventions, plus the gateway's own).

Conversation keys are never attributes: :func:`conversation_id` is a hash of the principal and
the key, the same on every instance.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = [
    "ABORT_REASON",
    "CONVERSATION_ID",
    "ERROR_TYPE",
    "OPERATION",
    "PROVIDER",
    "PROVIDER_NAME",
    "REQUESTED_BY",
    "REQUEST_MODEL",
    "RESPONSE_FINISH_REASONS",
    "RESPONSE_ID",
    "RESPONSE_MODEL",
    "RUN_ID",
    "RUN_STATUS",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "conversation_id",
    "genai_provider_name",
]

OPERATION: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
#: The gateway's own: its provider name (config), the run, its terminal, abort origin.
PROVIDER: Final = "agent_gateway.provider"
RUN_ID: Final = "agent_gateway.run.id"
RUN_STATUS: Final = "agent_gateway.run.status"
ABORT_REASON: Final = "agent_gateway.abort.reason"
#: Who asked for an abort or a command: the principal of the request.
REQUESTED_BY: Final = "agent_gateway.requested_by"

#: ``gen_ai.provider.name`` of each provider kind (http-api.md "Providers").
_GENAI_PROVIDERS: Final = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic-messages": "anthropic",
    "ag-ui": "ag_ui",
    "agent-event": "agent_event",
    "local-demo": "agent_gateway.demo",
    "fixture": "agent_gateway.fixture",
}


def genai_provider_name(kind: str | None) -> str:
    """``gen_ai.provider.name`` for a provider of ``kind`` (unknown kinds keep their name)."""
    if kind is None:
        return "unknown"
    return _GENAI_PROVIDERS.get(kind, kind)


def conversation_id(principal: str, key: str) -> str:
    """The conversation as it appears in spans: a hash, never the key itself."""
    digest = hashlib.sha256(f"{principal}\x00{key}".encode()).hexdigest()
    return digest[:32]
