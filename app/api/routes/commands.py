"""Command routes: approvals, tool results, tool retry (with Idempotency-Key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Path

from app.api.error_responses import ERRORS
from app.api.http import GatewayDep, GatewayRoute, Ref
from app.api.idempotency import idempotent
from app.api.responses import JSON
from app.api.schemas import ApprovalBody, CommandAccepted, ToolResultBody
from app.runs.commands import resolve_approval, retry_tool, submit_tool_result, target_scope
from app.runs.limits import check_json_size

__all__ = ["router"]

router = APIRouter(prefix="/v1/conversations", route_class=GatewayRoute, tags=["commands"])
_RESPONSES = {**ERRORS, 410: ERRORS[409] | {"description": "approval_expired"}}
IdempotencyKey = Header(None, alias="Idempotency-Key")


@router.post(
    "/{conversationKey}/approvals/{approvalId}",
    status_code=202,
    response_model=CommandAccepted,
    responses=_RESPONSES,
    summary="Resolve a waiting approval (approval.resolve)",
)
async def approve(
    gateway: GatewayDep,
    ref: Ref,
    body: ApprovalBody,
    approval_id: str = Path(alias="approvalId", min_length=1),
    idempotency_key: str | None = IdempotencyKey,
) -> JSON:
    check_json_size(body.data, gateway.settings.limits.max_input_bytes, "data")
    answer = await idempotent(
        gateway,
        ref,
        idempotency_key,
        f"approvals/{approval_id}",
        body.model_dump(exclude_unset=True),
        lambda: resolve_approval(
            gateway, ref, approval_id, body.decision, body.data, body.expectedVersion
        ),
        lambda: target_scope(gateway, ref, "approvals", approval_id),
    )
    return JSON(answer, status_code=202)


@router.post(
    "/{conversationKey}/tools/{toolCallId}/result",
    status_code=202,
    response_model=CommandAccepted,
    responses=_RESPONSES,
    summary="Hand back the result of a tool the app executed (tool.submit_result)",
)
async def tool_result(
    gateway: GatewayDep,
    ref: Ref,
    body: ToolResultBody,
    tool_call_id: str = Path(alias="toolCallId", min_length=1),
    idempotency_key: str | None = IdempotencyKey,
) -> JSON:
    check_json_size(body.result, gateway.settings.limits.max_input_bytes, "result")
    answer = await idempotent(
        gateway,
        ref,
        idempotency_key,
        f"tools/{tool_call_id}/result",
        body.model_dump(exclude_unset=True),
        lambda: submit_tool_result(gateway, ref, tool_call_id, body.result, body.isError),
        lambda: target_scope(gateway, ref, "toolCalls", tool_call_id),
    )
    return JSON(answer, status_code=202)


@router.post(
    "/{conversationKey}/tools/{toolCallId}/retry",
    status_code=202,
    response_model=CommandAccepted,
    responses=_RESPONSES,
    summary="Retry a failed, retryable tool (tool.retry)",
)
async def tool_retry(
    gateway: GatewayDep,
    ref: Ref,
    tool_call_id: str = Path(alias="toolCallId", min_length=1),
    idempotency_key: str | None = IdempotencyKey,
    _body: Annotated[dict[str, object] | None, Body()] = None,
) -> JSON:
    answer = await idempotent(
        gateway,
        ref,
        idempotency_key,
        f"tools/{tool_call_id}/retry",
        {},
        lambda: retry_tool(gateway, ref, tool_call_id),
        lambda: target_scope(gateway, ref, "toolCalls", tool_call_id),
    )
    return JSON(answer, status_code=202)
