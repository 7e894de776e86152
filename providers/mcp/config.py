"""What the gateway knows of its MCP servers (``[mcp.servers.NAME]``) and the policy per tool.

Header values are secrets (they may hold a bearer token): they are never part of a repr, a
log line, an event or an error. A server's tools reach the model name-spaced as
``SERVER__TOOL``; server names have no ``_`` so the split is unambiguous and two servers
never collide.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "SEPARATOR",
    "SERVER_NAME",
    "Approval",
    "McpServerConfig",
    "McpSettings",
    "call_version",
    "split_tool_name",
    "tool_name",
]

Approval = Literal["always", "never"]

#: A server name: letters, digits and ``-`` (no ``_``: see :func:`tool_name`).
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,31}$")
SEPARATOR = "__"


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table (header values already expanded from the env)."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_seconds: float = 30.0
    #: Tool names exposed (None: every tool the server lists, less ``deny``).
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    #: "always", "never", or per tool name (a tool the table omits: "always").
    approval: Approval | Mapping[str, Approval] = "always"
    editable: bool = False
    approval_expires_seconds: float | None = None
    #: A listing older than this is fetched again (also on ``notifications/tools/list_changed``).
    tools_ttl_seconds: float = 300.0

    def exposes(self, tool: str) -> bool:
        if tool in self.deny:
            return False
        return self.allow is None or tool in self.allow

    def needs_approval(self, tool: str) -> bool:
        if isinstance(self.approval, str):
            return self.approval == "always"
        return self.approval.get(tool, "always") == "always"


@dataclass(frozen=True, slots=True)
class McpSettings:
    """The servers one provider may use and the run's parallel tool call limit."""

    servers: Mapping[str, McpServerConfig]
    max_parallel: int = 4


def tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``."""
    return f"{server}{SEPARATOR}{tool}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not tool or not SERVER_NAME.match(server):
        return None
    return server, tool


def call_version(server: str, tool: str, arguments: Any) -> str:
    """The approval's ``version``: a hash of (server, tool, arguments), so an approval given
    for one call can never run another."""
    text = orjson.dumps([server, tool, arguments], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()[:32]
