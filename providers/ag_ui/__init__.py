"""The ``ag-ui`` provider: AG-UI agents over SSE or WebSocket (ag-ui-protocol models)."""

from collections.abc import Mapping
from typing import Any

from providers.ag_ui.json_patch import JsonPatchError, apply_patch
from providers.ag_ui.normalize import AguiNormalizer, parse_agui_event
from providers.ag_ui.provider import AGUI_EXTENSIONS, AguiProvider, decode_agui_chunk
from providers.ag_ui.request import build_run_agent_input
from providers.registry import network_transport, register_kind
from providers.transports.sse import SSETransport

__all__ = [
    "AGUI_EXTENSIONS",
    "AguiNormalizer",
    "AguiProvider",
    "JsonPatchError",
    "apply_patch",
    "build_run_agent_input",
    "decode_agui_chunk",
    "parse_agui_event",
]


def _create(name: str, config: Mapping[str, Any]) -> AguiProvider:
    transport = network_transport(config)
    if isinstance(transport, SSETransport):
        transport.strict_fields = True  # AG-UI frames carry only data: lines (AGUI501)
    return AguiProvider(
        name,
        url=str(config.get("url") or ""),
        headers=config.get("headers") or {},
        params=config.get("params") or {},
        transport=transport,
        max_event_bytes=config.get("max_upstream_event_bytes"),
    )


register_kind("ag-ui", _create)
