"""Commands to a waiting run (protocol.md §9): refusals checked against the state, then delivery.

Every refusal happens here, before the provider sees anything; an accepted command is delivered
to the run's owner through the backend and answered ``202``. A target id (approval or tool call)
names the entity of the conversation's running run when it has one, else of the latest run that
has it (upstreams reuse fixed ids across runs). The checks follow the target: 404 when unknown,
the route's 409 when it does not await this command (also when its run has ended), and
``run_not_running`` only when it still awaits but its run is not running.
"""

from __future__ import annotations

import time
from typing import Any

from app import errors
from app.backends import ConversationRef
from app.gateway import Gateway
from app.runs.limits import check_json_size
from app.telemetry.run_ops import command_span
from providers.contract import Command
from providers.mcp.schema import schema_errors

__all__ = ["resolve_approval", "retry_tool", "submit_tool_result", "target_scope"]


def _find(state: dict[str, Any], table: str, target_id: str) -> dict[str, Any] | None:
    """The entity with this id, preferring one of a running run, else the latest."""
    matches: list[dict[str, Any]] = [
        entity for entity in state.get(table, {}).values() if entity.get("id") == target_id
    ]
    runs: dict[str, Any] = state.get("runs", {})
    running = [m for m in matches if runs.get(str(m.get("runId")), {}).get("status") == "running"]
    candidates = running or matches
    return candidates[-1] if candidates else None


async def target_scope(
    gateway: Gateway, ref: ConversationRef, table: str, target_id: str
) -> tuple[str, ...]:
    """What a derived idempotency key of a command covers beyond route and body: the
    conversation's incarnation (its session id) and the run the target belongs to."""
    snapshot = await gateway.backend.snapshot(ref)
    if snapshot is None:
        return ()
    target = _find(snapshot.state, table, target_id)
    run_id = "" if target is None else str(target.get("runId"))
    return (snapshot.meta.session_id, run_id)


async def _state(gateway: Gateway, ref: ConversationRef) -> dict[str, Any]:
    snapshot = await gateway.backend.snapshot(ref)
    if snapshot is None:
        raise errors.ConversationNotFound("No such conversation.")
    return snapshot.state


def _require_running(state: dict[str, Any], run_id: str) -> None:
    if state.get("runs", {}).get(run_id, {}).get("status") != "running":
        raise errors.RunNotRunning(f"Run {run_id} is not running.")


def _in_flight(gateway: Gateway, ref: ConversationRef, run_id: str) -> set[str]:
    active = gateway.runs.active(ref)
    return active.in_flight if active is not None and active.run_id == run_id else set()


async def _deliver(
    gateway: Gateway, ref: ConversationRef, run_id: str, command: Command, target_id: str
) -> dict[str, Any]:
    telemetry = gateway.telemetry
    if telemetry is None:
        sent = await gateway.backend.send_command(ref, run_id, command)
    else:  # a ``run_command`` span linked to the run's span (app/telemetry/run_ops.py)
        active = gateway.runs.active(ref)
        known = None
        if active is not None and active.run_id == run_id and active.trace is not None:
            known = active.trace.traceparent
        async with command_span(telemetry, gateway.backend, ref, command.type, known):
            sent = await gateway.backend.send_command(ref, run_id, command)
    if not sent:
        raise errors.RunNotRunning(f"Run {run_id} is not running.")
    _in_flight(gateway, ref, run_id).add(target_id)
    return {
        "conversationKey": ref.key,
        "runId": run_id,
        "command": command.type,
        "targetId": target_id,
    }


async def resolve_approval(
    gateway: Gateway,
    ref: ConversationRef,
    approval_id: str,
    decision: str,
    data: Any = None,
    expected_version: Any = None,
) -> dict[str, Any]:
    check_json_size(data, gateway.settings.limits.max_input_bytes, "data")  # 413 / 422
    state = await _state(gateway, ref)
    approval = _find(state, "approvals", approval_id)
    if approval is None:
        raise errors.ApprovalNotFound(f"No approval {approval_id}.")
    run_id = approval["runId"]
    if approval.get("status") != "waiting" or approval_id in _in_flight(gateway, ref, run_id):
        raise errors.ApprovalAlreadyResolved(f"Approval {approval_id} is resolved.")
    _require_running(state, run_id)
    expires_at = approval.get("expiresAt")
    if isinstance(expires_at, int | float) and time.time() * 1000 >= expires_at:
        raise errors.ApprovalExpired(f"Approval {approval_id} has expired.")
    if decision == "modified" and approval.get("editable") is not True:
        raise errors.ApprovalNotEditable(f"Approval {approval_id} is not editable.")
    if expected_version is not None and expected_version != approval.get("version"):
        raise errors.VersionMismatch(
            f"Approval {approval_id} is at another version.",
            details={"version": approval.get("version")},
        )
    if decision == "modified":
        _check_edited_arguments(approval, data)
    payload: dict[str, Any] = {"approvalId": approval_id, "decision": decision}
    if data is not None:
        payload["data"] = data
    if expected_version is not None:
        payload["expectedVersion"] = expected_version
    return await _deliver(gateway, ref, run_id, Command("approval.resolve", payload), approval_id)


def _check_edited_arguments(approval: dict[str, Any], data: Any) -> None:
    """A server tool's approval (MCP) carries the tool's input schema in ``meta``: edited
    arguments must fit it, checked here so any instance refuses them the same way."""
    meta = approval.get("meta")
    if not isinstance(meta, dict) or meta.get("executor") != "gateway":
        return
    schema = meta.get("inputSchema")
    found = schema_errors(schema if isinstance(schema, dict) else None, data)
    if found:
        raise errors.ApprovalDataInvalid(
            "The edited arguments do not fit the tool's input schema.",
            details={"errors": found},
        )


def _awaits_app(tool: dict[str, Any]) -> bool:
    meta = tool.get("meta")
    return (
        tool.get("status") == "running"
        and isinstance(meta, dict)
        and (meta.get("executor") == "app")
    )


async def submit_tool_result(
    gateway: Gateway, ref: ConversationRef, tool_call_id: str, result: Any, is_error: bool
) -> dict[str, Any]:
    check_json_size(result, gateway.settings.limits.max_input_bytes, "result")  # 413 / 422
    state = await _state(gateway, ref)
    tool = _find(state, "toolCalls", tool_call_id)
    if tool is None:
        raise errors.ToolNotFound(f"No tool call {tool_call_id}.")
    run_id = tool["runId"]
    if not _awaits_app(tool) or tool_call_id in _in_flight(gateway, ref, run_id):
        raise errors.ToolNotAwaitingResult(f"Tool call {tool_call_id} awaits no result.")
    _require_running(state, run_id)
    payload: dict[str, Any] = {"toolCallId": tool_call_id, "result": result}
    if is_error:
        payload["isError"] = True
    return await _deliver(
        gateway, ref, run_id, Command("tool.submit_result", payload), tool_call_id
    )


async def retry_tool(gateway: Gateway, ref: ConversationRef, tool_call_id: str) -> dict[str, Any]:
    state = await _state(gateway, ref)
    tool = _find(state, "toolCalls", tool_call_id)
    if tool is None:
        raise errors.ToolNotFound(f"No tool call {tool_call_id}.")
    run_id = tool["runId"]
    error = tool.get("error")
    retryable = isinstance(error, dict) and error.get("retryable") is True
    if (
        tool.get("status") != "failed"
        or not retryable
        or tool_call_id in _in_flight(gateway, ref, run_id)
    ):
        raise errors.ToolNotRetryable(f"Tool call {tool_call_id} cannot be retried.")
    _require_running(state, run_id)
    return await _deliver(
        gateway, ref, run_id, Command("tool.retry", {"toolCallId": tool_call_id}), tool_call_id
    )
