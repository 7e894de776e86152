"""The tool catalogue: listings cached until their TTL or a ``tools/list_changed``,
name-spaced names, tools unusable by model APIs left out, unreachable servers skipped."""

from __future__ import annotations

from providers.mcp.catalogue import ToolCatalogue
from providers.mcp.config import split_tool_name, tool_name
from tests.mcp_server import serve_mcp
from tests.providers.mcp.support import settings_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _extra(note: str = "") -> str:
    return note


async def test_listing_cached_until_ttl_or_invalidation() -> None:
    clock = Clock()
    async with serve_mcp() as served:
        catalogue = ToolCatalogue(settings_for(served.url, tools_ttl_seconds=60), clock)
        first = await catalogue.tools()
        assert "tools__extra" not in first and "tools__echo" in first
        served.server.mcp.add_tool(_extra, name="extra")  # no notification sent
        clock.now = 59.0
        assert "tools__extra" not in await catalogue.tools()  # still the cached listing
        clock.now = 61.0
        assert "tools__extra" in await catalogue.tools()  # past its TTL: listed again
        served.server.mcp.remove_tool("extra")
        assert "tools__extra" in await catalogue.tools()
        catalogue.invalidate("tools")  # what notifications/tools/list_changed does
        assert "tools__extra" not in await catalogue.tools()


async def test_a_name_unusable_by_model_apis_is_not_offered() -> None:
    async with serve_mcp() as served:
        served.server.mcp.add_tool(_extra, name="has.dot")
        served.server.mcp.add_tool(_extra, name="x" * 70)
        tools = await ToolCatalogue(settings_for(served.url)).tools()
    assert all(len(name) <= 64 and "." not in name for name in tools)
    assert "tools__echo" in tools


async def test_unreachable_server_contributes_nothing() -> None:
    async with serve_mcp() as served:
        url = served.url
    catalogue = ToolCatalogue(settings_for(url, timeout_seconds=5))
    assert await catalogue.tools() == {}
    assert await catalogue.probe() == {"tools": None}


def test_names_split_back() -> None:
    assert split_tool_name(tool_name("git-hub", "create_issue")) == ("git-hub", "create_issue")
    assert split_tool_name("no_separator") is None
    assert split_tool_name("bad_server__tool") is None  # "_" is no server name character
