"""The ``[mcp]`` configuration section: MCP servers whose tools the gateway runs itself.

``[mcp.servers.NAME]`` (url, headers with ``${ENV}`` values, timeout_seconds, allow/deny,
approval, editable, approval_expires_seconds, tools_ttl_seconds) and ``[mcp] max_parallel``;
a model-API provider names the servers it may use in ``mcp_servers``. Header values are
secrets: never logged, never in an error message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from providers.mcp import McpServerConfig, McpSettings
from providers.mcp.config import SERVER_NAME

__all__ = ["MCP_PROVIDER_KINDS", "McpSection", "McpServerSection", "mcp_settings"]

#: The provider kinds that may list ``mcp_servers`` (the model APIs: the gateway runs the tools).
MCP_PROVIDER_KINDS = ("openai-chat", "openai-responses", "anthropic-messages")

ApprovalPolicy = Literal["always", "never"]


class McpServerSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout_seconds: float = Field(30, gt=0)
    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)
    approval: ApprovalPolicy | dict[str, ApprovalPolicy] = "always"
    editable: bool = False
    approval_expires_seconds: float | None = Field(None, gt=0)
    tools_ttl_seconds: float = Field(300, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (streamable HTTP)")
        return url

    @field_validator("headers")
    @classmethod
    def _expand_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        from app.config import expand_env

        return {name: expand_env(value) for name, value in headers.items()}

    def to_server(self, name: str) -> McpServerConfig:
        return McpServerConfig(
            name=name,
            url=self.url,
            headers=dict(self.headers),
            timeout_seconds=self.timeout_seconds,
            allow=None if self.allow is None else tuple(self.allow),
            deny=tuple(self.deny),
            approval=self.approval,
            editable=self.editable,
            approval_expires_seconds=self.approval_expires_seconds,
            tools_ttl_seconds=self.tools_ttl_seconds,
        )


class McpSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerSection] = Field(default_factory=dict)
    #: Tool calls of one run executed at once; more wait their turn.
    max_parallel: int = Field(4, ge=1)

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerSection]) -> dict[str, McpServerSection]:
        for name in servers:
            if not SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r}: letters, digits and '-' only (at most 32), "
                    "no '_' (tools reach the model as SERVER__TOOL)"
                )
        return servers


def mcp_settings(section: McpSection, names: Sequence[str]) -> McpSettings | None:
    """The settings a provider listing ``names`` gets (None when it lists none)."""
    if not names:
        return None
    servers = {name: section.servers[name].to_server(name) for name in names}
    return McpSettings(servers, max_parallel=section.max_parallel)
