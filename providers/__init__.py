"""Providers: the contract, transports, the provider base, the runner and the validator.

Public surface (import from the submodules for the rest):

- contract: ``AgentProvider``, ``AgentTransport``, ``CommandableProvider``, ``Capabilities``,
  ``Command``, ``RunOptions``, ``OnEvent``, ``AbortSignal``, ``is_agent_provider``
- base: ``ProviderBase``, ``RunContext``, ``standard_capabilities``
- runner: ``run_agent_provider``, ``AgentProviderProtocolError``
- validator: ``validate_agent_provider_events``; history: ``derive_history``
- registry: ``create_provider``, ``register_kind``, ``known_kinds``, ``UnknownProviderKind``
- errors: ``ProviderError`` and the upstream error types, ``AbortError``, ``WaitTimeout``
- transports: ``providers.transports`` (SSE, WebSocket, async-iterable, replay)
"""

from providers.base import ProviderBase, standard_capabilities
from providers.context import RunContext
from providers.contract import (
    AGENT_EVENT_PROTOCOL,
    AgentEvent,
    AgentProvider,
    AgentTransport,
    Capabilities,
    Command,
    CommandableProvider,
    OnEvent,
    RunOptions,
    is_agent_provider,
)
from providers.errors import AbortError, ProviderError, WaitTimeout, to_agent_error
from providers.history import derive_history
from providers.registry import (
    UnknownProviderKind,
    create_provider,
    known_kinds,
    register_kind,
)
from providers.runner import AgentProviderProtocolError, run_agent_provider
from providers.signal import AbortSignal
from providers.validator import validate_agent_provider_events

__all__ = [
    "AGENT_EVENT_PROTOCOL",
    "AbortError",
    "AbortSignal",
    "AgentEvent",
    "AgentProvider",
    "AgentProviderProtocolError",
    "AgentTransport",
    "Capabilities",
    "Command",
    "CommandableProvider",
    "OnEvent",
    "ProviderBase",
    "ProviderError",
    "RunContext",
    "RunOptions",
    "UnknownProviderKind",
    "WaitTimeout",
    "create_provider",
    "derive_history",
    "is_agent_provider",
    "known_kinds",
    "register_kind",
    "run_agent_provider",
    "standard_capabilities",
    "to_agent_error",
    "validate_agent_provider_events",
]
