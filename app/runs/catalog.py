"""The configured providers, built once at start through the providers registry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.config import Settings
from app.errors import UnknownProvider
from app.mcp_config import mcp_settings
from providers.contract import AgentProvider
from providers.registry import create_provider

__all__ = ["ProviderCatalog"]


class ProviderCatalog:
    """Provider name -> instance; ``overrides`` replaces entries by name (tests, embedding)."""

    def __init__(
        self, settings: Settings, overrides: Mapping[str, AgentProvider] | None = None
    ) -> None:
        self.default = settings.gateway.default_provider
        self._kinds: dict[str, str] = {}
        self._providers: dict[str, AgentProvider] = {}
        overrides = overrides or {}
        for name, config in settings.providers.items():
            self._kinds[name] = config.kind
            if name in overrides:
                self._providers[name] = overrides[name]
            else:
                provider_config = config.to_provider_config()
                provider_config["fast_paths"] = settings.gateway.fast_paths  # to its transport
                provider_config["mcp"] = mcp_settings(settings.mcp, config.mcp_servers)
                self._providers[name] = create_provider(name, config.kind, provider_config)
        for name, provider in overrides.items():
            if name not in self._providers:
                self._kinds[name] = "custom"
                self._providers[name] = provider

    def names(self) -> list[str]:
        return list(self._providers)

    def get(self, name: str) -> AgentProvider:
        provider = self._providers.get(name)
        if provider is None:
            raise UnknownProvider(f'Unknown provider "{name}".')
        return provider

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "kind": self._kinds[name],
                "transport": provider.transport.kind,
                "default": name == self.default,
                "capabilities": provider.capabilities.to_wire(),
            }
            for name, provider in self._providers.items()
        ]

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.transport.aclose()
