"""``…/ws``: the conversation stream over WebSocket, plus requests, aborts and commands in-band.

Server frames: ``snapshot``, ``event``, ``extension``, ``ack``, ``error``. A malformed client
frame gets an ``error`` frame and the socket stays open; a bad token closes with 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ValidationError

from app.api.http import get_gateway, principal_of
from app.api.schemas import (
    KEY_PATTERN,
    AbortBody,
    ApprovalBody,
    ReloadBody,
    RunBody,
    ToolResultBody,
)
from app.backends import ConversationRef
from app.errors import GatewayError
from app.gateway import Gateway
from app.runs.commands import resolve_approval, submit_tool_result
from app.streams.follow import Follow, follow
from app.streams.snapshot import snapshot_ws
from app.streams.sse import TRANSPORT_EXTENSION

__all__ = ["router"]

logger = logging.getLogger("app.ws")
CLOSE_SECONDS = 2.0
router = APIRouter()
_KEY = re.compile(KEY_PATTERN)


class _ApproveOp(ApprovalBody):
    approvalId: str


class _ToolResultOp(ToolResultBody):
    toolCallId: str


class _ResumeOp(BaseModel):
    cursor: str


class _Session:
    def __init__(self, gateway: Gateway, ref: ConversationRef, socket: WebSocket) -> None:
        self.gateway = gateway
        self.ref = ref
        self.socket = socket
        self.send_lock = asyncio.Lock()
        self.follower: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.stalled = False

    async def send(self, text: str) -> None:
        timeout = self.gateway.settings.gateway.send_timeout_seconds
        async with self.send_lock:
            try:
                async with asyncio.timeout(timeout):
                    await self.socket.send_text(text)
            except TimeoutError:
                self.gateway.metrics.subscriber_dropped("ws")
                logger.info("dropped a WebSocket subscriber whose send blocked too long")
                self.stalled = True
                self.closed.set()
                raise

    async def _follow(self, spec: Follow) -> None:
        try:
            async for item in follow(self.gateway, self.ref, spec):
                await self.send(snapshot_ws(item) if isinstance(item, dict) else item.ws)
        except asyncio.CancelledError:
            raise  # replaced by a resume
        except Exception:
            logger.debug("WebSocket stream ended", exc_info=True)
        self.closed.set()  # deleted, shutting down, or the send failed

    def restart(self, spec: Follow) -> None:
        if self.follower is not None:
            self.follower.cancel()
        self.follower = asyncio.create_task(self._follow(spec))

    async def error(self, code: str, message: str, op: str | None = None) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        if op is not None:
            frame["op"] = op
        await self.send(orjson.dumps(frame).decode())

    async def ack(self, op: str, **fields: Any) -> None:
        await self.send(orjson.dumps({"type": "ack", "op": op, **fields}).decode())

    # --- ops -----------------------------------------------------------------------------
    async def op_request(self, frame: dict[str, Any]) -> None:
        body = RunBody.model_validate(frame)
        sub = await self.gateway.runs.submit(self.ref, body.input, body.provider, body.multitask)
        await self.ack("request", **_accepted(sub.body))

    async def op_reload(self, frame: dict[str, Any]) -> None:
        body = ReloadBody.model_validate(frame)
        sub = await self.gateway.runs.submit(
            self.ref, body.input, body.provider, body.multitask, reload=True
        )
        await self.ack("reload", **_accepted(sub.body))

    async def op_abort(self, frame: dict[str, Any]) -> None:
        body = AbortBody.model_validate(frame)
        run_id = await self.gateway.runs.abort(self.ref, body.runId)
        if run_id is None:
            await self.ack("abort", aborted=False)
        else:
            await self.ack("abort", runId=run_id, aborted=True)

    async def op_approve(self, frame: dict[str, Any]) -> None:
        body = _ApproveOp.model_validate(frame)
        answer = await resolve_approval(
            self.gateway,
            self.ref,
            body.approvalId,
            body.decision,
            body.data,
            body.expectedVersion,
        )
        await self.ack("approve", runId=answer["runId"])

    async def op_tool_result(self, frame: dict[str, Any]) -> None:
        body = _ToolResultOp.model_validate(frame)
        answer = await submit_tool_result(
            self.gateway, self.ref, body.toolCallId, body.result, body.isError
        )
        await self.ack("tool_result", runId=answer["runId"])

    async def op_resume(self, frame: dict[str, Any]) -> None:
        body = _ResumeOp.model_validate(frame)
        self.restart(Follow(since=body.cursor))

    def handler(self, op: str) -> Callable[[dict[str, Any]], Awaitable[None]] | None:
        return {
            "request": self.op_request,
            "reload": self.op_reload,
            "abort": self.op_abort,
            "approve": self.op_approve,
            "tool_result": self.op_tool_result,
            "resume": self.op_resume,
        }.get(op)

    async def handle(self, text: str) -> None:
        limit = self.gateway.settings.limits.max_ws_frame_bytes
        if len(text.encode()) > limit:
            await self.error("payload_too_large", f"Frame larger than {limit} bytes.")
            return
        try:
            frame = orjson.loads(text)
        except orjson.JSONDecodeError:
            await self.error("invalid_request", "The frame is not JSON.")
            return
        op = frame.get("op") if isinstance(frame, dict) else None
        if not isinstance(op, str):
            await self.error("invalid_request", 'The frame needs a string "op".')
            return
        handler = self.handler(op)
        if handler is None:
            await self.error("unknown_op", f'Unknown op "{op}".', op)
            return
        try:
            await handler(frame)
        except ValidationError as exc:
            await self.error("invalid_request", _validation_message(exc), op)
        except GatewayError as exc:
            await self.error(exc.code, exc.message, op)

    async def receive_loop(self) -> None:
        while True:
            message = await self.socket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                await self.error("invalid_request", "Only text frames are accepted.")
                continue
            await self.handle(text)


def _accepted(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("runId", "cursor", "status")}


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


@router.websocket("/v1/conversations/{conversationKey}/ws")
async def conversation_ws(
    websocket: WebSocket, conversationKey: str, since: str | None = None
) -> None:
    gateway = get_gateway(websocket)
    try:
        principal = principal_of(websocket)
    except GatewayError as exc:  # accepted first, so the client sees the 1008 and its reason
        await websocket.accept()
        await websocket.send_text(
            orjson.dumps({"type": "error", "code": exc.code, "message": exc.message}).decode()
        )
        await websocket.close(code=1008, reason="unauthorized")
        return
    await websocket.accept()
    if not _KEY.match(conversationKey):
        await websocket.send_text(
            orjson.dumps(
                {"type": "error", "code": "invalid_request", "message": "Invalid conversationKey."}
            ).decode()
        )
        await websocket.close(code=1008, reason="invalid conversationKey")
        return
    ref = ConversationRef(principal, conversationKey)
    limits = gateway.runs.limits
    try:
        slot = await limits.acquire_subscriber(ref)
    except GatewayError as exc:  # too_many_subscribers: say why, then "try again later"
        await websocket.send_text(
            orjson.dumps({"type": "error", "code": exc.code, "message": exc.message}).decode()
        )
        await websocket.close(code=1013, reason=exc.code)
        return
    session = _Session(gateway, ref, websocket)
    try:
        with gateway.track_socket(), gateway.metrics.track_subscriber("ws"):
            await _serve(session, since or None)
    finally:
        await limits.release_subscriber(ref, slot)


async def _serve(session: _Session, since: str | None) -> None:
    gateway, websocket = session.gateway, session.socket
    session.restart(Follow(since=since))
    receiver = asyncio.create_task(session.receive_loop())
    closer = asyncio.create_task(session.closed.wait())
    try:
        await asyncio.wait({receiver, closer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (receiver, closer, session.follower):
            if task is not None:
                task.cancel()
        for task in (receiver, closer, session.follower):
            if task is not None:
                with contextlib.suppress(BaseException):
                    await task
        transport = websocket.scope.get("extensions", {}).get(TRANSPORT_EXTENSION)
        if session.stalled and transport is not None:
            transport.abort()  # a close frame would wait behind the unread buffer forever
        elif session.closed.is_set():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await websocket.close(code=1001 if gateway.closing.is_set() else 1013)
