"""``POST /v1/ag-ui/{provider}``: AG-UI ``RunAgentInput`` in, AG-UI event stream out.

A new user message starts a run through the same accept path as ``POST …/runs`` (auth,
limits, multitask, metrics); tool messages and ``resume`` answering a waiting run are
delivered to it as ``tool.submit_result`` / ``approval.resolve`` commands, and the request
streams that same run's continuation.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from ag_ui.core import RunAgentInput
from fastapi import APIRouter, Path
from fastapi.responses import Response

from app.agui.encoder import AguiEncoder
from app.agui.input import TurnRequest, read_input
from app.agui.stream import AguiStream, agui_response
from app.agui.tracker import RunTracker
from app.api.error_responses import ERRORS
from app.api.errors import ApiError
from app.api.http import GatewayDep, GatewayRoute, Principal
from app.api.schemas import KEY_PATTERN
from app.backends import ConversationRef
from app.gateway import Gateway
from app.runs.commands import resolve_approval, submit_tool_result
from app.runs.limits import check_json_size

__all__ = ["router"]

router = APIRouter(prefix="/v1/ag-ui", route_class=GatewayRoute, tags=["ag-ui"])
_KEY = re.compile(KEY_PATTERN)
_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events (the ag-ui-protocol encoding): RUN_STARTED … RUN_FINISHED "
        "or RUN_ERROR",
        "content": {"text/event-stream": {}},
    },
}


async def _continue(
    gateway: Gateway, ref: ConversationRef, request: TurnRequest
) -> tuple[str, str, dict[str, Any], set[str]]:
    """Deliver the answers to the waiting run: (runId, cursor, state, answered ids)."""
    snapshot = await gateway.backend.snapshot(ref)
    if snapshot is None:
        raise ApiError(404, "conversation_not_found", "No such conversation.")
    runs = {answer.run_id for answer in request.tools} | {a.run_id for a in request.approvals}
    if len(runs) != 1:
        raise ApiError(422, "invalid_request", "The answers address more than one run.")
    run_id = runs.pop()
    answered: set[str] = set()
    limit = gateway.settings.limits.max_input_bytes
    for tool in request.tools:
        check_json_size(tool.result, limit, "result")
        body = await submit_tool_result(gateway, ref, tool.tool_call_id, tool.result, tool.is_error)
        run_id = body["runId"]
        answered.add(tool.tool_call_id)
    for approval in request.approvals:
        body = await resolve_approval(
            gateway, ref, approval.approval_id, approval.decision, approval.data
        )
        run_id = body["runId"]
        answered.add(approval.approval_id)
    return run_id, snapshot.cursor, snapshot.state, answered


@router.post(
    "/{provider}",
    response_class=Response,
    responses={**ERRORS, **_STREAM_DOC},
    summary="Run an AG-UI agent: RunAgentInput in, AG-UI event stream out",
)
async def run_agent(
    gateway: GatewayDep,
    principal: Principal,
    body: RunAgentInput,
    provider: Annotated[str, Path(min_length=1)],
) -> Response:
    if not _KEY.match(body.thread_id):
        raise ApiError(
            422, "invalid_request", "threadId must be 1-128 characters of [A-Za-z0-9._:-]."
        )
    ref = ConversationRef(principal, body.thread_id)
    request = read_input(body)
    gateway.catalog.get(provider)  # 404 unknown_provider before anything else
    limits = gateway.runs.limits
    # A stream slot counted like every SSE/WebSocket subscriber (cluster-wide on Redis): 429
    # before the run is accepted; the response frees it.
    slot = await limits.acquire_subscriber(ref)
    try:
        if request.turn is not None:
            submission = await gateway.runs.submit(
                ref, request.turn.input, provider, request.turn.multitask
            )
            run_id, cursor = submission.request.run_id, str(submission.body["cursor"])
            state: dict[str, Any] = {}
            answered: set[str] = set()
        else:
            run_id, cursor, state, answered = await _continue(gateway, ref, request)
    except BaseException:
        await limits.release_subscriber(ref, slot)
        raise
    encoder = AguiEncoder(body.thread_id, body.run_id, run_id, answered=answered)
    tracker = RunTracker(run_id, state, answered)
    stream = AguiStream(
        gateway, ref, run_id, cursor, encoder, tracker, continuation=request.turn is None
    )
    return agui_response(stream, slot)
