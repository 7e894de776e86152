"""The gateway's refusals as domain exceptions, each with its stable error code.

Runs, limits, backends and auth raise these; they know no HTTP. Only ``app/api/`` maps them
to a status and headers (``app/api/errors.py``), for the HTTP answer, the WebSocket ``error``
frame and the AG-UI endpoint alike. The codes are the registry of ``docs/spec/http-api.md``
("Errors"): add to it, never reuse a code for something else.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BY_CODE",
    "ApprovalAlreadyResolved",
    "ApprovalDataInvalid",
    "ApprovalExpired",
    "ApprovalNotEditable",
    "ApprovalNotFound",
    "BackendUnavailable",
    "ConversationNotFound",
    "GatewayError",
    "InvalidRequest",
    "NotAService",
    "NothingToReload",
    "PayloadTooLarge",
    "QueueFull",
    "RateLimited",
    "RunInProgress",
    "RunNotFound",
    "RunNotRunning",
    "ShuttingDown",
    "TooManyConversations",
    "TooManySubscribers",
    "ToolNotAwaitingResult",
    "ToolNotFound",
    "ToolNotRetryable",
    "UnknownProvider",
    "VersionMismatch",
]


class GatewayError(Exception):
    """A refusal: ``code`` (the registry's), a human ``message``, optional ``details`` (JSON)
    and ``retry_after`` (seconds the client should wait before trying again)."""

    code: str = "gateway_error"

    def __init__(
        self, message: str, details: Any = None, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.retry_after = retry_after


# --- not found ---------------------------------------------------------------------------
class ConversationNotFound(GatewayError):
    code = "conversation_not_found"


class UnknownProvider(GatewayError):
    code = "unknown_provider"


class NothingToReload(GatewayError):
    code = "nothing_to_reload"


class RunNotFound(GatewayError):
    code = "run_not_found"


class ApprovalNotFound(GatewayError):
    code = "approval_not_found"


class ToolNotFound(GatewayError):
    code = "tool_not_found"


# --- conflicts with the conversation's state ---------------------------------------------
class RunInProgress(GatewayError):
    code = "run_in_progress"


class RunNotRunning(GatewayError):
    code = "run_not_running"


class ApprovalAlreadyResolved(GatewayError):
    code = "approval_already_resolved"


class ToolNotAwaitingResult(GatewayError):
    code = "tool_not_awaiting_result"


class ToolNotRetryable(GatewayError):
    code = "tool_not_retryable"


class VersionMismatch(GatewayError):
    code = "version_mismatch"


class ApprovalExpired(GatewayError):
    code = "approval_expired"


# --- bad input ---------------------------------------------------------------------------
class InvalidRequest(GatewayError):
    code = "invalid_request"


class ApprovalNotEditable(GatewayError):
    code = "approval_not_editable"


class ApprovalDataInvalid(GatewayError):
    """A ``modified`` decision whose data breaks the tool's input schema (server tools)."""

    code = "approval_data_invalid"


class PayloadTooLarge(GatewayError):
    code = "payload_too_large"


class NotAService(GatewayError):
    """``X-Act-As`` from a principal that is not a service."""

    code = "not_a_service"


# --- limits (each says when to try again) ------------------------------------------------
class RateLimited(GatewayError):
    code = "rate_limited"


class QueueFull(GatewayError):
    code = "queue_full"


class TooManyConversations(GatewayError):
    code = "too_many_conversations"


class TooManySubscribers(GatewayError):
    code = "too_many_subscribers"


# --- the gateway cannot serve now --------------------------------------------------------
class BackendUnavailable(GatewayError):
    code = "backend_unavailable"


class ShuttingDown(GatewayError):
    code = "shutting_down"


def _leaves(cls: type[GatewayError]) -> list[type[GatewayError]]:
    found: list[type[GatewayError]] = []
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__:
            found.append(sub)
            found.extend(_leaves(sub))
    return found


#: Each domain error class by its code (for a refusal chosen from a table of codes).
BY_CODE: dict[str, type[GatewayError]] = {cls.code: cls for cls in _leaves(GatewayError)}
