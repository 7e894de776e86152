"""Error bodies of http-api.md: every non-2xx answer is ``{"error": {code, message, details?}}``.

The one place where a domain error (:mod:`app.errors`) gets its HTTP status and headers
(:data:`STATUS`, :func:`error_response`); the WebSocket route sends the same code and message
in an ``error`` frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import errors
from app.api.responses import JSON
from app.errors import GatewayError

__all__ = [
    "STATUS",
    "ApiError",
    "error_body",
    "error_headers",
    "error_response",
    "error_status",
    "install_error_handlers",
]

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}


#: The HTTP status of each domain error (http-api.md "Errors").
STATUS: dict[type[GatewayError], int] = {
    errors.NotAService: 403,
    errors.ConversationNotFound: 404,
    errors.UnknownProvider: 404,
    errors.NothingToReload: 404,
    errors.RunNotFound: 404,
    errors.ApprovalNotFound: 404,
    errors.ToolNotFound: 404,
    errors.RunInProgress: 409,
    errors.RunNotRunning: 409,
    errors.ApprovalAlreadyResolved: 409,
    errors.ToolNotAwaitingResult: 409,
    errors.ToolNotRetryable: 409,
    errors.VersionMismatch: 409,
    errors.ApprovalExpired: 410,
    errors.PayloadTooLarge: 413,
    errors.InvalidRequest: 422,
    errors.ApprovalNotEditable: 422,
    errors.ApprovalDataInvalid: 422,
    errors.RateLimited: 429,
    errors.QueueFull: 429,
    errors.TooManyConversations: 429,
    errors.TooManySubscribers: 429,
    errors.BackendUnavailable: 503,
    errors.ShuttingDown: 503,
}


class ApiError(GatewayError):
    """An error answer the HTTP layer gives itself, with an explicit status (401
    ``unauthorized``, 415 ``unsupported_media_type``, ``idempotency_key_reused``, …)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, details)
        self.status = status
        self.code = code
        self.headers = dict(headers or {})


def error_status(exc: GatewayError) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    for cls in type(exc).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


def error_headers(exc: GatewayError) -> dict[str, str]:
    if isinstance(exc, ApiError):
        return exc.headers
    if exc.retry_after is not None:
        return {"Retry-After": str(exc.retry_after)}
    return {}


def error_response(exc: GatewayError) -> JSON:
    """The HTTP answer of a refusal: its status, ``{"error": …}`` body and headers."""
    return JSON(
        error_body(exc.code, exc.message, exc.details),
        status_code=error_status(exc),
        headers=error_headers(exc),
    )


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}


async def _gateway_error(_: Request, exc: Exception) -> JSON:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> JSON:
    assert isinstance(exc, RequestValidationError)
    details = jsonable_encoder(
        [{k: v for k, v in err.items() if k in ("loc", "msg", "type")} for err in exc.errors()]
    )
    on_path = any(err.get("loc", ("",))[0] == "path" for err in exc.errors())
    message = "Invalid conversationKey." if on_path else "The request is invalid."
    return JSON(error_body("invalid_request", message, details), status_code=422)


async def _http_error(_: Request, exc: Exception) -> JSON:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # FastAPI: a body it cannot decode (e.g. not UTF-8) is not JSON
        return JSON(error_body("invalid_request", "The body is not valid JSON."), status_code=422)
    code = _STATUS_CODES.get(exc.status_code, "http_error")
    return JSON(
        error_body(code, str(exc.detail)),
        status_code=exc.status_code,
        headers=dict(exc.headers or {}),
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
