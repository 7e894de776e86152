"""Error bodies of http-api.md: every non-2xx answer is ``{"error": {code, message, details?}}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.responses import JSON

__all__ = ["ApiError", "error_body", "install_error_handlers"]

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}


class ApiError(Exception):
    """An error answer of the registry (http-api.md "Errors")."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}


async def _api_error(_: Request, exc: Exception) -> JSON:
    assert isinstance(exc, ApiError)
    return JSON(exc.body(), status_code=exc.status, headers=exc.headers)


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
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
