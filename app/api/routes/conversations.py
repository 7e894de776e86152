"""Conversation routes: runs, reload, abort, state, delete, listing."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request
from fastapi.responses import Response

from app.api.error_responses import ERRORS
from app.api.errors import ApiError
from app.api.http import (
    GatewayDep,
    GatewayRoute,
    Principal,
    Ref,
    fast_path,
    get_gateway,
    principal_of,
)
from app.api.idempotency import idempotent_run
from app.api.listing import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ConversationList,
    ConversationSummary,
    conversation_item,
    list_page,
)
from app.api.responses import JSON
from app.api.schemas import (
    KEY_PATTERN,
    AbortAnswer,
    AbortBody,
    ConversationPatch,
    ReloadBody,
    RunAccepted,
    RunBody,
    RunRecord,
    SnapshotBody,
)
from app.backends import ConversationRef
from app.runs.limits import check_json_size
from app.runs.manager import AnswerOf, Submission
from app.runs.records import run_record, wait_for_run
from app.streams.follow import Follow
from app.streams.snapshot import snapshot_object
from app.streams.sse import sse_response

__all__ = ["RUN_ID_HEADER", "router", "well_formed_start"]

#: On a ``?stream=true`` answer: the id of the run the stream is for.
RUN_ID_HEADER = "X-Run-Id"

router = APIRouter(prefix="/v1/conversations", route_class=GatewayRoute, tags=["conversations"])
_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    202: {"model": RunAccepted, "description": "Run accepted"},
    200: {
        "description": "With ?stream=true: the SSE stream of this run",
        "content": {"text/event-stream": {}},
        "headers": {
            RUN_ID_HEADER: {
                "description": "The run this stream is for",
                "schema": {"type": "string"},
            }
        },
    },
}


async def _accept(
    gateway: GatewayDep,
    ref: Ref,
    body: RunBody | ReloadBody,
    stream: bool,
    idempotency_key: str | None,
    *,
    reload: bool,
    last_event_id: str | None = None,
) -> Response:
    input = body.input
    if input is not None:  # also checked by runs.submit (WebSocket requests)
        check_json_size(input, gateway.settings.limits.max_input_bytes, "input")

    accepted_here: list[str] = []  # the run this request accepted (not an idempotent replay)
    limits = gateway.runs.limits
    taken: list[str | None] = []  # a stream's subscriber slot, once taken

    async def take_stream_slot() -> None:
        taken.append(await limits.acquire_subscriber(ref))  # 429 before the run is accepted

    async def submit(answer_of: AnswerOf | None = None) -> Submission:
        submission = await gateway.runs.submit(
            ref,
            input,
            body.provider,
            body.multitask,
            reload=reload,
            answer_of=answer_of,
            before=take_stream_slot if stream else None,
        )
        accepted_here.append(submission.request.run_id)
        if submission.body["status"] == "started":  # GET …/state after the 202 shows the run
            await submission.request.wait_started()
        return submission

    try:
        if not idempotency_key:  # an empty header is no key (never a derived one)
            answer = (await submit()).body
        else:  # a retry answers the first answer (with ?stream=true: the first run's stream)

            async def accept(answer_of: AnswerOf) -> dict[str, Any]:
                return (await submit(answer_of)).body

            route = "reload" if reload else "runs"
            answer = await idempotent_run(
                gateway, ref, idempotency_key, route, body.model_dump(exclude_unset=True), accept
            )
        if stream and not taken:  # a retry's stream: no run accepted, its slot taken now
            await take_stream_slot()
    except BaseException:
        for slot in taken:
            await limits.release_subscriber(ref, slot)
        raise
    if stream:  # a reconnect (Last-Event-ID) continues after what it already received
        run_id = answer["runId"]
        own = run_id if run_id in accepted_here else None  # its span is this span's child
        if last_event_id:
            spec = Follow(since=last_event_id, until_run=run_id, own_run=own)
        else:
            spec = Follow(start=answer["cursor"], until_run=run_id, own_run=own)
        # The stream may begin with the end of earlier runs (and runs queued before this one):
        # the header names the run it is for.
        return await sse_response(
            gateway, ref, spec, headers={RUN_ID_HEADER: answer["runId"]}, taken=(taken[0],)
        )
    return JSON(answer, status_code=202)


_KEY = re.compile(KEY_PATTERN)
#: The ``stream`` values the fast path reads. FastAPI accepts more spellings (``yes``, ``on``…)
#: and answers 422 to others: those requests go to it.
_STREAM: dict[str | None, bool] = {None: False, "true": True, "false": False}


def well_formed_start(key: str, stream: str | None, body: bytes) -> tuple[RunBody, bool] | None:
    """The body and ``stream`` of a ``start_run`` request FastAPI would accept as it is
    (conversation key, query, JSON body as it parses and validates them); None otherwise."""
    flag = _STREAM.get(stream)
    if flag is None or not body or _KEY.fullmatch(key) is None:
        return None
    try:  # json.loads as Starlette's request.json(); the model as FastAPI validates a body
        return RunBody.model_validate(json.loads(body)), flag
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return None


async def _start_run_fast(request: Request) -> Response | None:
    """``start_run`` for a well-formed request, without FastAPI's dependency solving and parameter
    validation, a large share of a start's CPU (BENCHMARKS.md, "Costs behind the code's shortcuts").
    The principal is resolved after the checks, FastAPI resolves it before them: an auth error wins
    over a validation error either way, and nothing was done before it."""
    key: str = request.path_params["conversationKey"]
    parsed = well_formed_start(key, request.query_params.get("stream"), await request.body())
    if parsed is None:
        return None
    body, stream = parsed
    headers = request.headers
    return await _accept(
        get_gateway(request),
        ConversationRef(principal_of(request), key),
        body,
        stream,
        headers.get("idempotency-key"),
        reload=False,
        last_event_id=headers.get("last-event-id"),
    )


@router.post(
    "/{conversationKey}/runs",
    status_code=202,
    response_model=RunAccepted,
    responses={**ERRORS, **_STREAM_DOC},
    summary="onRequest: start a run",
)
@fast_path(_start_run_fast)
async def start_run(
    gateway: GatewayDep,
    ref: Ref,
    body: RunBody,
    stream: bool = Query(False, description="Answer with the SSE stream of this run"),
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    return await _accept(
        gateway, ref, body, stream, idempotency_key, reload=False, last_event_id=last_event_id
    )


@router.post(
    "/{conversationKey}/reload",
    status_code=202,
    response_model=RunAccepted,
    responses={**ERRORS, **_STREAM_DOC},
    summary="onReload: a new run, reusing the last input when none is given",
)
async def reload_run(
    gateway: GatewayDep,
    ref: Ref,
    body: Annotated[ReloadBody | None, Body()] = None,
    stream: bool = Query(False),
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    return await _accept(
        gateway,
        ref,
        body or ReloadBody(),
        stream,
        idempotency_key,
        reload=True,
        last_event_id=last_event_id,
    )


@router.post(
    "/{conversationKey}/abort",
    response_model=AbortAnswer,
    responses={**ERRORS, 202: {"model": AbortAnswer, "description": "Cancellation requested"}},
    summary="Abort the active run (or a named one); idempotent",
)
async def abort_run(
    gateway: GatewayDep, ref: Ref, body: Annotated[AbortBody | None, Body()] = None
) -> Response:
    run_id = await gateway.runs.abort(ref, body.runId if body else None)
    if run_id is None:
        return JSON({"aborted": False}, status_code=200)
    return JSON({"runId": run_id, "aborted": True}, status_code=202)


@router.get(
    "/{conversationKey}/state",
    response_model=SnapshotBody,
    responses=ERRORS,
    summary="The current snapshot",
)
async def get_state(gateway: GatewayDep, ref: Ref) -> Response:
    snapshot = await gateway.find_snapshot(ref)  # live, else archived
    if snapshot is None:
        raise ApiError(404, "conversation_not_found", "No such conversation.")
    return JSON(snapshot_object(ref.key, snapshot))


@router.delete(
    "/{conversationKey}",
    status_code=204,
    responses=ERRORS,
    summary="Abort, then drop state and log",
)
async def delete_conversation(gateway: GatewayDep, ref: Ref) -> Response:
    await gateway.runs.cancel_all(ref, wait=gateway.settings.gateway.shutdown_grace_seconds)
    await gateway.backend.delete(ref)
    return Response(status_code=204)


@router.get(
    "",
    response_model=ConversationList,
    responses=ERRORS,
    summary="The caller's conversations, newest first (cursor pagination)",
)
async def list_conversations(
    gateway: GatewayDep,
    principal: Principal,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(description="nextCursor of the previous page")] = None,
) -> Response:
    return JSON(await list_page(gateway.backend, principal, cursor, limit, gateway.archive))


@router.patch(
    "/{conversationKey}",
    response_model=ConversationSummary,
    responses=ERRORS,
    summary="Set the conversation's title",
)
async def patch_conversation(gateway: GatewayDep, ref: Ref, body: ConversationPatch) -> Response:
    meta = await gateway.backend.get_meta(ref)
    if meta is None:
        raise ApiError(404, "conversation_not_found", "No such conversation.")
    meta.title = body.title  # kept in the meta beside the snapshot: no event is appended
    await gateway.backend.save_meta(ref, meta)
    return JSON(await conversation_item(gateway.backend, ref, meta))


@router.get(
    "/{conversationKey}/runs/{runId}",
    response_model=RunRecord,
    responses=ERRORS,
    summary="One run's record",
)
async def get_run(
    gateway: GatewayDep, ref: Ref, run_id: Annotated[str, Path(alias="runId", min_length=1)]
) -> Response:
    return JSON(await run_record(gateway, ref, run_id))


@router.get(
    "/{conversationKey}/runs/{runId}/wait",
    response_model=RunRecord,
    responses=ERRORS,
    summary="Long-poll until the run ends (or the timeout), then its record",
)
async def wait_run(
    gateway: GatewayDep,
    ref: Ref,
    run_id: Annotated[str, Path(alias="runId", min_length=1)],
    seconds: Annotated[float, Query(alias="timeout", gt=0, le=300)] = 30.0,
) -> Response:
    return JSON(await wait_for_run(gateway, ref, run_id, seconds))
