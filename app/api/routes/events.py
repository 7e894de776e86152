"""``GET …/events``: the conversation as an SSE stream."""

from __future__ import annotations

from fastapi import APIRouter, Header, Query
from starlette.responses import Response

from app.api.error_responses import ERRORS
from app.api.http import GatewayDep, Ref
from app.streams.follow import Follow
from app.streams.sse import sse_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/conversations", tags=["streams"])


@router.get(
    "/{conversationKey}/events",
    responses={
        **ERRORS,
        200: {
            "description": "SSE: a snapshot frame, then AgentEvents",
            "content": {"text/event-stream": {}},
        },
    },
    summary="SSE stream: snapshot, then AgentEvents",
)
async def events(
    gateway: GatewayDep,
    ref: Ref,
    since: str | None = Query(None, description="Resume after this cursor"),
    until_idle: bool = Query(False, alias="untilIdle"),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
) -> Response:
    resume = last_event_id or since
    return await sse_response(gateway, ref, Follow(since=resume or None, until_idle=until_idle))
