"""Service principals: a service token may act on another principal's conversations.

``[auth] services`` lists the tokens (or, equivalently, the principals of tokens) that are
services. A request from a service may carry ``X-Act-As: <principal>``; it then addresses that
principal's conversations exactly as the principal would. ``X-Act-As`` from any other caller
(or with auth off) is 403 ``not_a_service``. Every use is logged with the service's principal,
the principal acted as, the method and the path — never the token.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated

from fastapi import Header
from starlette.requests import HTTPConnection

from app.auth.tokens import TokenTable
from app.config import AuthSection
from app.errors import InvalidRequest, NotAService

__all__ = ["ACT_AS_HEADER", "ActAsHeader", "ServiceTable", "act_as"]

logger = logging.getLogger("app.service_auth")
ACT_AS_HEADER = "X-Act-As"
_PRINCIPAL = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")

#: For the OpenAPI document: the header as a parameter of every conversation route.
ActAsHeader = Annotated[
    str | None,
    Header(
        alias=ACT_AS_HEADER,
        description=(
            "Service tokens only: act on this principal's conversations "
            "(403 not_a_service for other tokens)."
        ),
    ),
]


class ServiceTable:
    """Which callers are services: by token (constant-time lookup) or by principal."""

    def __init__(self, auth: AuthSection) -> None:
        self._tokens = TokenTable({entry: entry for entry in auth.services})
        self._principals = frozenset(auth.services) & frozenset(auth.tokens.values())

    def is_service(self, token: str | None, principal: str) -> bool:
        by_token = self._tokens.lookup(token) is not None
        return by_token or principal in self._principals


def _services(connection: HTTPConnection, auth: AuthSection) -> ServiceTable:
    table: ServiceTable | None = getattr(connection.app.state, "service_table", None)
    if table is None:
        table = connection.app.state.service_table = ServiceTable(auth)
    return table


def act_as(connection: HTTPConnection, auth: AuthSection, token: str | None, principal: str) -> str:
    """The principal a request addresses: ``X-Act-As`` for a service, else the caller's own."""
    target = connection.headers.get(ACT_AS_HEADER)
    if target is None:
        return principal
    if auth.mode == "none" or not _services(connection, auth).is_service(token, principal):
        raise NotAService("X-Act-As is only accepted from a service token.")
    target = target.strip()
    if not _PRINCIPAL.match(target):
        raise InvalidRequest("X-Act-As must name a principal.")
    logger.info(
        "service %s acts as %s: %s %s",
        principal,
        target,
        connection.scope.get("method", "WEBSOCKET"),
        connection.url.path,
        extra={"service": principal, "act_as": target},
    )
    return target
