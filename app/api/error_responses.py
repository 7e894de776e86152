"""OpenAPI documentation of the error answers shared by the routes."""

from __future__ import annotations

from typing import Any

from app.api.schemas import ErrorBody

__all__ = ["ERRORS"]

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        401: "unauthorized",
        403: "not_a_service (X-Act-As from a token that is not a service)",
        404: "not found (conversation_not_found, unknown_provider, …)",
        409: "conflict (run_in_progress, …)",
        413: "payload_too_large",
        415: "unsupported_media_type",
        422: "invalid_request",
        429: "queue_full, rate_limited, too_many_conversations, too_many_subscribers",
        503: "shutting_down / backend_unavailable",
    }.items()
}
