"""Server-side tools from MCP servers (streamable HTTP) for the model-API providers."""

from providers.mcp.config import McpServerConfig, McpSettings
from providers.mcp.run import McpTools

__all__ = ["McpServerConfig", "McpSettings", "McpTools"]
