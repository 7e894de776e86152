"""The one registry of provider kinds.

``register_kind(kind, factory)`` where ``factory(name, config) -> AgentProvider``;
``create_provider(name, kind, config)`` builds a configured provider (``config`` is the
provider's TOML table: ``url``, ``transport``, ``model``, ``headers``, ``timeout_seconds``,
``idle_timeout_seconds``, ``params``, ``path`` ...); ``known_kinds()`` lists the kinds.

Built-in kinds live in their own modules, which register themselves when imported; the
registry imports them on first use, so importing this module stays cheap and cycle-free.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from providers.contract import AgentProvider, AgentTransport
from providers.transports import DEFAULT_MAX_CONNECTIONS, SSETransport, WebSocketTransport

__all__ = [
    "ProviderFactory",
    "UnknownProviderKind",
    "create_provider",
    "known_kinds",
    "network_transport",
    "register_kind",
]

ProviderFactory = Callable[[str, Mapping[str, Any]], AgentProvider]

#: kind -> module that registers it on import
BUILTIN_KIND_MODULES: dict[str, str] = {
    "local-demo": "providers.local_demo",
    "fixture": "providers.fixture",
    "agent-event": "providers.agent_event",
    "ag-ui": "providers.ag_ui",
    "openai-chat": "providers.openai_chat",
    "openai-responses": "providers.openai_responses",
    "anthropic-messages": "providers.anthropic_messages",
}

_KINDS: dict[str, ProviderFactory] = {}
_loaded = False


class UnknownProviderKind(ValueError):
    def __init__(self, kind: str) -> None:
        known = ", ".join(known_kinds()) or "none"
        super().__init__(f'Unknown provider kind "{kind}" (known kinds: {known}).')
        self.kind = kind


def register_kind(kind: str, factory: ProviderFactory, *, replace: bool = True) -> None:
    if not replace and kind in _KINDS:
        raise ValueError(f'Provider kind "{kind}" is already registered.')
    _KINDS[kind] = factory


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN_KIND_MODULES.values():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a kind whose module is not there yet
            if exc.name != module:
                raise


def known_kinds() -> list[str]:
    _load_builtins()
    return sorted(_KINDS)


def create_provider(name: str, kind: str, config: Mapping[str, Any]) -> AgentProvider:
    _load_builtins()
    factory = _KINDS.get(kind)
    if factory is None:
        raise UnknownProviderKind(kind)
    return factory(name, config)


def network_transport(config: Mapping[str, Any], default: str = "sse") -> AgentTransport:
    """The SSE or WebSocket transport a provider's config asks for (``transport`` key);
    ``fast_paths`` (the gateway's ``[gateway] fast_paths``, default true) False forces the SSE
    transport's public httpx paths."""
    kind = str(config.get("transport") or default)
    timeout = _seconds(config.get("timeout_seconds"), 60.0)
    idle = _seconds(config.get("idle_timeout_seconds"), 60.0)
    if kind == "sse":
        pool = config.get("max_connections")
        return SSETransport(
            timeout_seconds=timeout,
            idle_timeout_seconds=idle,
            max_connections=DEFAULT_MAX_CONNECTIONS if pool is None else int(pool),
            fast_paths=bool(config.get("fast_paths", True)),
        )
    if kind == "websocket":
        return WebSocketTransport(timeout_seconds=timeout, idle_timeout_seconds=idle)
    raise ValueError(f'Unknown transport "{kind}" (expected "sse" or "websocket").')


def _seconds(value: Any, default: float) -> float | None:
    if value is None:
        return default
    number = float(value)
    return number if number > 0 else None
