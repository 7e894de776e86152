"""One provider's MCP tools inside its runs: offered to the model, approved, executed by the
run's owner, their results handed back to the model within the same run.

Events of a server tool call: ``tool.requested`` (``meta.executor = "gateway"``,
``meta.server``), then, where the policy asks, ``approval.requested`` (``toolCallId``, the
exact arguments in ``data``, ``editable``, ``version`` = hash of (server, tool, arguments),
``expiresAt``; ``meta.inputSchema`` is the tool's schema, so any instance can check edited
arguments), ``approval.resolved``, then ``tool.running`` and ``tool.completed {result}`` or
``tool.failed``. A call runs as a task of the owner; the task never emits: once it holds one of
the run's ``[mcp] max_parallel`` slots it sends the internal command ``mcp.started`` (the
run emits ``tool.running``; a call waiting for a slot stays pending), and its outcome comes
back as ``mcp.result``, both through the run's command queue like the app's answers, so the
run's events keep one writer and the model call continues once nothing of the turn waits.
An MCP error result, a timeout or an unreachable server fails the tool (the model gets the
error as the tool's result), never the run.
An abort, error or wait timeout of the run cancels the calls in flight (:meth:`McpTools.cancel`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from providers.context import RunContext
from providers.contract import AgentEvent, Command
from providers.mcp import client
from providers.mcp.catalogue import ExposedTool, ToolCatalogue
from providers.mcp.config import McpSettings, call_version
from providers.mcp.schema import schema_errors

__all__ = ["INTERNAL_COMMANDS", "RESULT_COMMAND", "STARTED_COMMAND", "McpTools"]

#: The internal command saying a call holds its slot and starts: the run emits ``tool.running``.
STARTED_COMMAND = "mcp.started"
#: The internal command carrying a finished call's outcome back into the run.
RESULT_COMMAND = "mcp.result"
#: The commands only the run's own call tasks send (:meth:`McpTools.apply_internal`).
INTERNAL_COMMANDS = frozenset({STARTED_COMMAND, RESULT_COMMAND})

TOOL_REJECTED = {"code": "tool_rejected", "message": "The user rejected this tool call."}
APPROVAL_EXPIRED = {
    "code": "approval_expired",
    "message": "The approval for this tool call expired; the tool was not run.",
}


@dataclass(slots=True)
class _Call:
    tool_call_id: str
    tool: ExposedTool
    arguments: dict[str, Any]
    #: ``meta`` of the call's ``tool.running`` (``arguments`` when an approval edited them)
    running_meta: dict[str, Any] | None = None


@dataclass(slots=True)
class _RunState:
    slots: asyncio.Semaphore
    tools: dict[str, ExposedTool] = field(default_factory=dict)
    #: approvalId -> the call it decides
    approvals: dict[str, _Call] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class McpTools:
    """The MCP side of one model-API provider (its servers, their tool catalogue)."""

    scratch_key = "mcp"

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self.catalogue = ToolCatalogue(settings)
        client.load_sdk()  # at start: never a blocking import inside a run

    def state(self, ctx: RunContext) -> _RunState:
        state: _RunState | None = ctx.scratch.get(self.scratch_key)
        if state is None:
            state = ctx.scratch[self.scratch_key] = _RunState(
                asyncio.Semaphore(self.settings.max_parallel)
            )
        return state

    # -- the model's view -------------------------------------------------------------------

    async def prepare(self, ctx: RunContext) -> None:
        """Before each model call: the servers' current tools (cached listings)."""
        self.state(ctx).tools = await self.catalogue.tools()

    def model_tools(self, ctx: RunContext) -> list[dict[str, Any]]:
        return [tool.to_input_tool() for tool in self.state(ctx).tools.values()]

    def exposed(self, ctx: RunContext, name: str) -> ExposedTool | None:
        return self.state(ctx).tools.get(name)

    # -- a call ------------------------------------------------------------------------------

    def arguments_complete(self, ctx: RunContext, tool_call_id: str) -> AgentEvent | None:
        """The model finished a server tool call: ask for approval (the event returned), or
        schedule the call (None: ``tool.running`` follows once it holds a slot)."""
        record = ctx.tool(tool_call_id)
        assert record is not None
        tool = self.state(ctx).tools[record.name]
        arguments = _arguments(record.arguments)
        if arguments is None:
            error = {
                "code": "invalid_tool_arguments",
                "message": "The tool call's arguments are not a JSON object.",
            }
            return ctx.fail_tool(tool_call_id, error)
        call = _Call(tool_call_id, tool, arguments)
        server = self.settings.servers[tool.server]
        if not server.needs_approval(tool.tool):
            self._start(ctx, call)
            return None
        approval_id = f"approval-{tool_call_id}"
        self.state(ctx).approvals[approval_id] = call
        expires_at = None
        if server.approval_expires_seconds is not None:
            now = ctx.options.now() if ctx.options.now else time.time() * 1000.0
            expires_at = int(now + server.approval_expires_seconds * 1000)
        return ctx.request_approval(
            approval_id,
            tool_call_id=tool_call_id,
            description=f"Run {tool.tool} on {tool.server}",
            data=arguments,
            editable=server.editable,
            expires_at=expires_at,
            version=call_version(tool.server, tool.tool, arguments),
            meta={
                "executor": "gateway",
                "server": tool.server,
                "tool": tool.tool,
                "inputSchema": tool.input_schema,
            },
        )

    def _start(self, ctx: RunContext, call: _Call) -> None:
        """Schedule the call: ``tool.running`` follows when it holds a slot (``mcp.started``)."""
        state = self.state(ctx)
        task = asyncio.get_running_loop().create_task(self._execute(ctx, state, call))
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)

    async def _execute(self, ctx: RunContext, state: _RunState, call: _Call) -> None:
        server = self.settings.servers[call.tool.server]
        payload: dict[str, Any] = {"toolCallId": call.tool_call_id}
        async with state.slots:
            started = {"toolCallId": call.tool_call_id, "meta": call.running_meta}
            ctx.options.commands.put_nowait(Command(STARTED_COMMAND, started))
            try:
                outcome = await client.call_tool(
                    server, call.tool.tool, call.arguments, self.catalogue.invalidate
                )
            except client.McpTimeout as error:
                payload["error"] = {"code": "mcp_timeout", "message": str(error)}
            except client.McpUnavailable as error:
                payload["error"] = {"code": "mcp_unavailable", "message": str(error)}
            else:
                if outcome.is_error:
                    message = outcome.text or "The tool failed."
                    payload["error"] = {
                        "code": "tool_error",
                        "message": message,
                        "details": {"result": outcome.result},
                    }
                else:
                    payload["result"] = outcome.result
        ctx.options.commands.put_nowait(Command(RESULT_COMMAND, payload))

    # -- commands ----------------------------------------------------------------------------

    def apply_internal(self, command: Command, ctx: RunContext) -> bool:
        """One of :data:`INTERNAL_COMMANDS`; False when the tool no longer waits on the call."""
        if command.type == STARTED_COMMAND:
            return self.apply_started(command, ctx)
        return self.apply_result(command, ctx)

    def apply_started(self, command: Command, ctx: RunContext) -> bool:
        """``mcp.started``: ``tool.running``; False when the tool no longer waits on the call."""
        tool_call_id = str(command.payload.get("toolCallId"))
        record = ctx.tool(tool_call_id)
        if record is None or record.status != "pending" or not ctx.is_open("tool", tool_call_id):
            return False
        meta = command.payload.get("meta")
        RunContext.tool_running(ctx, tool_call_id, meta=meta if isinstance(meta, dict) else None)
        return True

    def apply_result(self, command: Command, ctx: RunContext) -> bool:
        """``mcp.result``: the call's tool ends; False when the tool no longer waits on it."""
        tool_call_id = str(command.payload.get("toolCallId"))
        if not ctx.is_open("tool", tool_call_id):
            return False
        error = command.payload.get("error")
        if isinstance(error, dict):
            ctx.fail_tool(tool_call_id, error)
        else:
            ctx.complete_tool(tool_call_id, command.payload.get("result"))
        return True

    def on_command(self, command: Command, ctx: RunContext) -> None:
        """After ``approval.resolved`` of a server tool's approval: run it or refuse it."""
        if command.type not in ("approval.resolve", "approval.expire"):
            return
        call = self.state(ctx).approvals.pop(str(command.payload.get("approvalId")), None)
        if call is None or not ctx.is_open("tool", call.tool_call_id):
            return
        decision = command.payload.get("decision", "expired")
        if command.type == "approval.expire" or decision == "expired":
            ctx.fail_tool(call.tool_call_id, APPROVAL_EXPIRED)
        elif decision == "rejected":
            ctx.fail_tool(call.tool_call_id, TOOL_REJECTED)
        elif decision == "modified":
            data = command.payload.get("data")
            server = self.settings.servers[call.tool.server]
            errors = schema_errors(call.tool.input_schema, data)
            if not server.editable or errors:  # the gateway refuses these before
                error = {
                    "code": "approval_data_invalid",
                    "message": "The edited arguments do not fit the tool's input schema.",
                    "details": {"errors": errors},
                }
                ctx.fail_tool(call.tool_call_id, error)
                return
            assert isinstance(data, dict)
            self._start(ctx, _Call(call.tool_call_id, call.tool, data, {"arguments": data}))
        else:
            self._start(ctx, call)

    def cancel(self, ctx: RunContext) -> None:
        """The run ends: cancel the calls in flight (the SDK tells each server)."""
        state: _RunState | None = ctx.scratch.get(self.scratch_key)
        if state is not None:
            for task in list(state.tasks):
                task.cancel()


def _arguments(text: str) -> dict[str, Any] | None:
    """The call's arguments as an object (empty text: ``{}``); None when they are not one."""
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
