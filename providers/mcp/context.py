"""The run context of a model-API provider with MCP servers: a tool call the model makes to a
server tool is the gateway's own (``meta.executor = "gateway"``, ``meta.server``); once its
arguments are complete it goes to :class:`providers.mcp.run.McpTools` (approval, then the
call) instead of being handed to the app."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from providers.context import RunContext
from providers.contract import AgentEvent, RunOptions

if TYPE_CHECKING:
    from providers.mcp.run import McpTools

__all__ = ["McpRunContext"]


class McpRunContext(RunContext):
    def __init__(self, options: RunOptions, provider_id: str, mcp: McpTools) -> None:
        super().__init__(options, provider_id)
        self.mcp = mcp
        #: toolCallId -> ``tool.requested`` of each server tool call of the run
        self.gateway_requests: dict[str, AgentEvent] = {}

    def request_tool(
        self,
        tool_call_id: str,
        name: str,
        arguments: str | None = None,
        *,
        index: int | None = None,
        executor: str = "runtime",
        attempt: int | None = None,
        retry_of: str | None = None,
        parent_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentEvent:
        exposed = self.mcp.exposed(self, name) if executor == "app" else None
        if exposed is not None:
            executor = "gateway"
            meta = {**(meta or {}), "executor": "gateway", "server": exposed.server}
        event = super().request_tool(
            tool_call_id,
            name,
            arguments,
            index=index,
            executor=executor,
            attempt=attempt,
            retry_of=retry_of,
            parent_id=parent_id,
            meta=meta,
        )
        if exposed is not None:
            self.gateway_requests[tool_call_id] = event
        return event

    def tool_running(
        self, tool_call_id: str, *, meta: Mapping[str, Any] | None = None
    ) -> AgentEvent:
        """A server tool's arguments are complete: its approval or its call, not ``tool.running``
        (that comes once the call holds a slot). Returns the event that now stands for the
        call: ``approval.requested``, ``tool.failed``, or its ``tool.requested`` while the call
        is scheduled."""
        record = self.tool(tool_call_id)
        if record is not None and record.executor == "gateway" and record.status == "pending":
            event = self.mcp.arguments_complete(self, tool_call_id)
            return event if event is not None else self.gateway_requests[tool_call_id]
        return super().tool_running(tool_call_id, meta=meta)
