"""HTTP plumbing shared by the routes: body limits and media type, principal, references, and
the fast paths that answer a route's well-formed requests without FastAPI's parameter solving."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Request
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, HTTPConnection
from starlette.responses import Response
from starlette.types import Message, Receive

from app.api.errors import ApiError
from app.api.schemas import KEY_PATTERN
from app.auth.services import ActAsHeader, act_as
from app.auth.tokens import TokenTable, bearer_token
from app.backends import ConversationRef
from app.gateway import Gateway

__all__ = [
    "ConversationKey",
    "FastPath",
    "GatewayRoute",
    "Principal",
    "fast_path",
    "get_gateway",
    "principal_of",
]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: A route's handler for the requests it can answer by itself: a response, or None to let
#: FastAPI's handler answer (it then answers exactly as if there were no fast path).
FastPath = Callable[[Request], Awaitable[Response | None]]
_FAST_PATHS: dict[Callable[..., Any], FastPath] = {}
#: False in the tests that compare every fast path with FastAPI's general path.
FAST_PATHS_ENABLED = True
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


def fast_path(handler: FastPath) -> Callable[[_Endpoint], _Endpoint]:
    """Give the decorated endpoint (of a ``GatewayRoute``) ``handler`` as its fast path.

    It must answer only requests FastAPI would accept as they are, as the endpoint would, and
    leave every other request (None) to FastAPI: validation errors stay FastAPI's. Apply it
    below the route decorator (the route reads it when it is built)."""

    def register(endpoint: _Endpoint) -> _Endpoint:
        _FAST_PATHS[endpoint] = handler
        return endpoint

    return register


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class GatewayRoute(APIRoute):
    """Checks the token (401: a wrong token is a 401 whatever the body), then size (413) and
    media type (415) of a body before FastAPI parses it, then lets the endpoint's fast path
    (``fast_path``) answer if it can."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        fast = _FAST_PATHS.get(self.endpoint)

        async def guarded(request: Request) -> Response:
            if request.method in _BODY_METHODS:
                gateway: Gateway = request.app.state.gateway
                if gateway.settings.auth.mode != "none":
                    _token_and_principal(request)  # before the body is read
                limit = gateway.settings.gateway.max_body_bytes
                declared = request.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise _too_large(limit)
                body = b""
                try:
                    async for chunk in request.stream():
                        body += chunk
                        if len(body) > limit:
                            raise _too_large(limit)
                except ClientDisconnect:  # left mid-body (slow loris): nobody reads an answer
                    return Response(status_code=400)
                request = Request(request.scope, _replay(body, request.receive))
                if body.strip() and not _is_json(request.headers.get("content-type", "")):
                    raise ApiError(
                        415, "unsupported_media_type", "The body must be application/json."
                    )
            if fast is not None and FAST_PATHS_ENABLED:
                response = await fast(request)
                if response is not None:
                    return response
            return await handler(request)

        return guarded


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first returns ``body`` (already read): FastAPI parses it from there.
    Later calls (a disconnect) go to the server's ``receive``."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"The body is larger than {limit} bytes.")


def get_gateway(connection: HTTPConnection) -> Gateway:
    gateway: Gateway = connection.app.state.gateway
    return gateway


def principal_of(connection: HTTPConnection) -> str:
    """The principal a request addresses: ``anonymous`` without auth, else the bearer token's
    principal, or for a service token the principal named by ``X-Act-As`` (app/auth/services.py).
    """
    auth = get_gateway(connection).settings.auth
    if auth.mode == "none":
        return act_as(connection, auth, None, "anonymous")  # X-Act-As: 403 not_a_service
    token, principal = _token_and_principal(connection)
    return act_as(connection, auth, token, principal)  # a service's X-Act-As (logged)


def _token_and_principal(connection: HTTPConnection) -> tuple[str, str]:
    """The request's bearer token and its principal (auth on); 401 if missing or unknown."""
    table: TokenTable | None = getattr(connection.app.state, "token_table", None)
    if table is None:  # built once per app; lookups are constant-time (app/auth/tokens.py)
        table = connection.app.state.token_table = TokenTable(
            get_gateway(connection).settings.auth.tokens
        )
    token = bearer_token(
        connection.headers.get("authorization", ""), connection.query_params.get("access_token")
    )
    principal = table.lookup(token)
    if token is None or principal is None:
        raise ApiError(401, "unauthorized", "Missing or invalid bearer token.")
    return token, principal


# The dependencies are coroutines: FastAPI runs a plain ``def`` dependency in a worker thread,
# a thread hop per dependency per request (time to first event, bench/ttfe_bench.py).


async def _principal(connection: HTTPConnection, _act_as: ActAsHeader = None) -> str:
    """``principal_of`` as a dependency (declares ``X-Act-As`` in the OpenAPI document)."""
    return principal_of(connection)


async def _gateway(connection: HTTPConnection) -> Gateway:
    return get_gateway(connection)


Principal = Annotated[str, Depends(_principal)]
ConversationKey = Annotated[
    str, Path(alias="conversationKey", pattern=KEY_PATTERN, min_length=1, max_length=128)
]


async def conversation_ref(principal: Principal, key: ConversationKey) -> ConversationRef:
    return ConversationRef(principal, key)


Ref = Annotated[ConversationRef, Depends(conversation_ref)]
GatewayDep = Annotated[Gateway, Depends(_gateway)]
