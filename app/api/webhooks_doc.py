"""The completion webhooks in the OpenAPI document (OpenAPI 3.1 ``webhooks``).

Documentation only: what the gateway POSTs to ``[webhooks] url``; the dispatcher is
``app/observability/webhooks/``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header
from pydantic import BaseModel, Field

from core.runs import RUN_TERMINAL_TYPE_LIST, RunTerminalType

__all__ = ["WebhookPayload", "WebhookRun", "document_webhooks"]


class WebhookRun(BaseModel):
    runId: str
    sessionId: str | None = None
    status: Literal["completed", "failed", "cancelled"]
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = Field(None, description="AgentError of a failed run")
    reason: str | None = Field(None, description="Why a run was cancelled")
    createdAt: float | None = None
    updatedAt: float | None = None


class WebhookPayload(BaseModel):
    id: str = Field(description="Delivery id, the same on every retry (de-duplicate by it)")
    type: RunTerminalType
    timestamp: float = Field(description="When the delivery was prepared (ms since epoch)")
    principal: str = Field(description="Owner of the conversation (for X-Act-As)")
    conversationKey: str
    run: WebhookRun


_SIGNATURE_DOC = (
    "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, '<t>.' + raw body)>; "
    "verify in constant time and reject an old t"
)


def document_webhooks(app: FastAPI) -> None:
    """Declare one webhook per event type (2xx acknowledges; others are retried, bounded)."""
    for event in RUN_TERMINAL_TYPE_LIST:

        async def receiver(
            body: WebhookPayload,
            signature: Annotated[
                str, Header(alias="X-Gateway-Signature", description=_SIGNATURE_DOC)
            ],
            delivery: Annotated[str, Header(alias="X-Gateway-Delivery")],
            event_type: Annotated[str, Header(alias="X-Gateway-Event")],
        ) -> None:
            """The gateway POSTs this (signed) to ``[webhooks] url`` when a run ends."""

        app.webhooks.post(
            event,
            summary=f"{event}: a run ended (sent when listed in [webhooks] events)",
            status_code=204,
            responses={204: {"description": "Any 2xx acknowledges the delivery"}},
        )(receiver)
