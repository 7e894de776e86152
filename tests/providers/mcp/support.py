"""Helpers of the MCP provider tests: settings for a test server, event picks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.contract import AgentEvent
from providers.mcp import McpServerConfig, McpSettings
from tests.mcp_server import DEFAULT_TOKEN


def settings_for(url: str, name: str = "tools", **server: Any) -> McpSettings:
    """One server ``name`` at ``url`` (with the right token unless ``headers`` is given)."""
    server.setdefault("headers", {"Authorization": f"Bearer {DEFAULT_TOKEN}"})
    server.setdefault("approval", "never")
    server.setdefault("timeout_seconds", 10.0)
    max_parallel = server.pop("max_parallel", 4)
    config = McpServerConfig(name=name, url=url, **server)
    return McpSettings({name: config}, max_parallel=max_parallel)


def of_type(events: Sequence[AgentEvent], *types: str) -> list[AgentEvent]:
    return [event for event in events if event["type"] in types]


def types_of(events: Sequence[AgentEvent], *prefixes: str) -> list[str]:
    return [e["type"] for e in events if e["type"].startswith(prefixes)]
