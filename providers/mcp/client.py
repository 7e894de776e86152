"""The MCP client of the gateway: the official ``mcp`` SDK over streamable HTTP, one session
per listing or call (initialize handshake, then the request, then the session is closed).

The SDK is a large import: :func:`load_sdk` imports it when a provider with MCP servers is
built (at start, never inside a run, where it would block the event loop for seconds); a
gateway without MCP servers never loads it.

Cancelling :func:`call_tool` (an abort) makes the SDK send ``notifications/cancelled`` for the
request, then the session's connection closes. Every library failure becomes
:class:`McpUnavailable` (server unreachable, HTTP error, protocol error) or
:class:`McpTimeout`; their messages never carry a header value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers.mcp.config import McpServerConfig

if TYPE_CHECKING:
    import httpx2
    from mcp.types import CallToolResult

__all__ = [
    "McpTimeout",
    "McpToolInfo",
    "McpUnavailable",
    "ToolOutcome",
    "call_tool",
    "list_tools",
    "load_sdk",
]

log = logging.getLogger("agent_gateway.mcp")

OnListChanged = Callable[[str], None]


class McpUnavailable(Exception):
    """The server could not be reached or did not speak MCP."""


class McpTimeout(McpUnavailable):
    """The server did not answer within the server's ``timeout_seconds``."""


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's answer: its result for the model, and whether the server flagged an error."""

    result: Any
    is_error: bool
    text: str


def load_sdk() -> None:
    """Import the SDK (and jsonschema, for edited arguments) now."""
    import jsonschema  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401


def _http_client(server: McpServerConfig) -> httpx2.AsyncClient:
    import httpx2

    timeout = httpx2.Timeout(server.timeout_seconds, read=max(server.timeout_seconds, 30.0))
    return httpx2.AsyncClient(headers=dict(server.headers), timeout=timeout)


@asynccontextmanager
async def _session(server: McpServerConfig, on_list_changed: OnListChanged | None) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import ToolListChangedNotification

    async def handler(message: Any) -> None:
        if on_list_changed is not None and isinstance(message, ToolListChangedNotification):
            on_list_changed(server.name)

    async with _http_client(server) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode="legacy", message_handler=handler, cache=None) as client:
            yield client


async def _guarded(server: McpServerConfig, work: Awaitable[Any]) -> Any:
    try:
        async with asyncio.timeout(server.timeout_seconds):
            return await work
    except TimeoutError:
        raise McpTimeout(
            f'MCP server "{server.name}" did not answer within {server.timeout_seconds:g} s.'
        ) from None
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the SDK's and httpx2's failures, in exception groups too
        log.warning("mcp server %s failed: %s", server.name, type(error).__name__)
        raise McpUnavailable(f'MCP server "{server.name}" is unreachable.') from None


async def list_tools(
    server: McpServerConfig, on_list_changed: OnListChanged | None = None
) -> list[McpToolInfo]:
    """Every tool the server lists (all pages)."""

    async def work() -> list[McpToolInfo]:
        found: list[McpToolInfo] = []
        async with _session(server, on_list_changed) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                found.extend(
                    McpToolInfo(tool.name, tool.description or "", dict(tool.input_schema))
                    for tool in page.tools
                )
                cursor = page.next_cursor
                if not cursor:
                    return found

    result: list[McpToolInfo] = await _guarded(server, work())
    return result


async def call_tool(
    server: McpServerConfig,
    tool: str,
    arguments: dict[str, Any],
    on_list_changed: OnListChanged | None = None,
) -> ToolOutcome:
    """Call ``tool``; an MCP error result is an outcome with ``is_error``, not an exception."""

    async def work() -> CallToolResult:
        async with _session(server, on_list_changed) as client:
            result: CallToolResult = await client.call_tool(tool, arguments)
            return result

    result: CallToolResult = await _guarded(server, work())
    return outcome_of(result)


def outcome_of(result: CallToolResult) -> ToolOutcome:
    """The model's view of a result: the text of its text parts; any other content as JSON."""
    parts = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
    texts = [str(part.get("text", "")) for part in parts if part.get("type") == "text"]
    text = "\n".join(texts)
    value: Any = text if len(texts) == len(parts) else parts
    if result.structured_content is not None and not texts:
        value = result.structured_content
    return ToolOutcome(value, bool(result.is_error), text)
