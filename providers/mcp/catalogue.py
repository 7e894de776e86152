"""The tools of a provider's MCP servers, as the model sees them (name-spaced, policy applied).

A server's listing is cached and fetched again after its ``tools_ttl_seconds`` or as soon as
the server sends ``notifications/tools/list_changed`` (on any session the gateway holds with
it). A server that cannot be listed contributes no tools to that model call; the run goes on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from providers.mcp import client
from providers.mcp.config import McpServerConfig, McpSettings, tool_name

__all__ = ["MODEL_TOOL_NAME", "ExposedTool", "ToolCatalogue"]

log = logging.getLogger("agent_gateway.mcp")

#: A tool name every model API accepts (OpenAI's rule, the strictest): a server tool whose
#: name-spaced name breaks it is not offered.
MODEL_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ExposedTool:
    """A server tool offered to the model."""

    name: str  # name-spaced
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]

    def to_input_tool(self) -> dict[str, Any]:
        """The provider-neutral tool definition (as in a run's ``input.tools``)."""
        return {
            "name": self.name,
            "description": self.description or f"{self.tool} ({self.server})",
            "parameters": self.input_schema or {"type": "object", "properties": {}},
        }


@dataclass(slots=True)
class _Listing:
    tools: list[client.McpToolInfo]
    fetched: float


class ToolCatalogue:
    """Cached listings of the servers of one :class:`McpSettings`."""

    def __init__(self, settings: McpSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._listings: dict[str, _Listing] = {}

    def invalidate(self, server: str) -> None:
        """Forget a server's listing (``notifications/tools/list_changed``)."""
        self._listings.pop(server, None)

    async def _listing(self, server: McpServerConfig) -> list[client.McpToolInfo] | None:
        cached = self._listings.get(server.name)
        if cached is not None and self._clock() - cached.fetched < server.tools_ttl_seconds:
            return cached.tools
        try:
            tools = await client.list_tools(server, self.invalidate)
        except client.McpUnavailable:
            return None
        self._listings[server.name] = _Listing(tools, self._clock())
        return tools

    async def tools(self) -> dict[str, ExposedTool]:
        """Name-spaced name -> tool, for every server that answers, exposed tools only."""
        servers = list(self.settings.servers.values())
        listings = await asyncio.gather(*(self._listing(server) for server in servers))
        exposed: dict[str, ExposedTool] = {}
        for server, listing in zip(servers, listings, strict=True):
            for info in listing or ():
                if server.exposes(info.name):
                    name = tool_name(server.name, info.name)
                    if not MODEL_TOOL_NAME.match(name):
                        log.warning(
                            "mcp tool %r of %s: name unusable by model APIs", info.name, server.name
                        )
                        continue
                    exposed[name] = ExposedTool(
                        name, server.name, info.name, info.description, info.input_schema
                    )
        return exposed

    async def probe(self) -> Mapping[str, list[client.McpToolInfo] | None]:
        """Each server's full listing, fetched now (``None``: unreachable)."""
        self._listings.clear()
        servers = list(self.settings.servers.values())
        listings = await asyncio.gather(*(self._listing(server) for server in servers))
        return dict(zip((server.name for server in servers), listings, strict=True))
