"""``check-config --probe-tools``: connect to each ``[mcp.servers]`` entry, list its tools and
which of them the model is offered; exit 1 naming every server that could not be listed.
Header values are never printed."""

from __future__ import annotations

import asyncio
import sys

from app.config import Settings
from providers.mcp import McpSettings
from providers.mcp.catalogue import MODEL_TOOL_NAME, ToolCatalogue
from providers.mcp.client import McpToolInfo

__all__ = ["probe_tools"]


def probe_tools(settings: Settings) -> int:
    section = settings.mcp
    servers = {name: server.to_server(name) for name, server in section.servers.items()}
    if not servers:
        print("mcp: no servers configured")
        return 0
    catalogue = ToolCatalogue(McpSettings(servers, section.max_parallel))
    listings = asyncio.run(catalogue.probe())
    users = {
        name: sorted(p for p, cfg in settings.providers.items() if name in cfg.mcp_servers)
        for name in servers
    }
    unreachable = [name for name, listing in listings.items() if listing is None]
    for name, listing in listings.items():
        server = servers[name]
        used_by = ", ".join(users[name]) or "no provider"
        if listing is None:
            print(f"server {name} ({server.url}): UNREACHABLE (used by {used_by})")
            continue
        print(f"server {name} ({server.url}): {len(listing)} tools (used by {used_by})")
        for tool in listing:
            exposed, approval = server.exposes(tool.name), server.needs_approval(tool.name)
            print(f"  {_line(name, tool, exposed, approval)}")
    if unreachable:
        print(
            f"agent-gateway check-config: unreachable MCP servers: {', '.join(unreachable)}",
            file=sys.stderr,
        )
        return 1
    return 0


def _line(server: str, tool: McpToolInfo, exposed: bool, approval: bool) -> str:
    if not exposed:
        return f"{tool.name}: hidden (allow/deny)"
    if not MODEL_TOOL_NAME.match(f"{server}__{tool.name}"):
        return f"{tool.name}: hidden (name unusable by model APIs: [A-Za-z0-9_-], 64 at most)"
    policy = "approval" if approval else "no approval"
    return f"{tool.name}: exposed as {server}__{tool.name} ({policy})"
