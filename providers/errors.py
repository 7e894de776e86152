"""The project's error types for providers and transports, and the one boundary mapper.

Every failure that ends a run carries an ``AgentError`` code from the registry of
``spec/http-api.md``. Library errors (httpx, websockets, OS) never cross this boundary: the
transports wrap their I/O in :func:`map_transport_errors`, which turns them into
:class:`ProviderError` subclasses. Messages never contain URLs, headers or bodies beyond a short
excerpt of an upstream error answer (which never carries our own credentials).

``AbortError`` (the run was aborted) and ``WaitTimeout`` (the run waited on the app too long)
are not failures of the upstream; the provider base maps them by the closure table.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import websockets.exceptions as ws_exc

from providers.signal import AbortReason, AbortSignal

__all__ = [
    "AbortError",
    "ProviderError",
    "UpstreamConnectError",
    "UpstreamDropped",
    "UpstreamError",
    "UpstreamEventTooLarge",
    "UpstreamHTTPError",
    "UpstreamIdleTimeout",
    "UpstreamMalformedChunk",
    "UpstreamProtocolError",
    "UpstreamTimeout",
    "WaitTimeout",
    "map_transport_errors",
    "to_agent_error",
]

#: Longest upstream body excerpt kept in an error's details.
BODY_EXCERPT_CHARS = 512


class ProviderError(Exception):
    """A run failure with a registry ``code``; becomes ``AgentError`` via :meth:`to_agent_error`."""

    code: str = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retryable = retryable
        self.details = details

    def to_agent_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message or self.code}
        if self.retryable is not None:
            error["retryable"] = self.retryable
        if self.details is not None:
            error["details"] = self.details
        return error


class UpstreamHTTPError(ProviderError):
    """A non-2xx answer before the stream; retryable for 429 and 5xx."""

    code = "upstream_http_error"

    def __init__(self, status: int, body_excerpt: str = "") -> None:
        details: dict[str, Any] = {"status": status}
        if body_excerpt:
            details["body"] = redact(body_excerpt)[:BODY_EXCERPT_CHARS]
        super().__init__(
            f"Upstream answered HTTP {status}.",
            retryable=status == 429 or status >= 500,
            details=details,
        )
        self.status = status


class UpstreamConnectError(ProviderError):
    code = "upstream_connect_error"

    def __init__(self, message: str = "Could not connect to the upstream.") -> None:
        super().__init__(message, retryable=True)


class UpstreamIdleTimeout(ProviderError):
    code = "upstream_idle_timeout"

    def __init__(self, message: str = "The upstream sent nothing within the idle timeout.") -> None:
        super().__init__(message, retryable=True)


class UpstreamTimeout(ProviderError):
    code = "upstream_timeout"

    def __init__(self, message: str = "The upstream request timed out.") -> None:
        super().__init__(message, retryable=True)


class UpstreamDropped(ProviderError):
    code = "upstream_dropped"

    def __init__(self, message: str = "The upstream stream ended without its terminator.") -> None:
        super().__init__(message, retryable=True)


class UpstreamMalformedChunk(ProviderError):
    code = "upstream_malformed_chunk"

    def __init__(self, message: str = "The upstream sent a chunk that cannot be parsed.") -> None:
        super().__init__(message, retryable=False)


class UpstreamProtocolError(ProviderError):
    code = "upstream_protocol_error"

    def __init__(
        self, message: str = "The upstream broke its protocol.", details: Any = None
    ) -> None:
        super().__init__(message, retryable=False, details=details)


class UpstreamError(ProviderError):
    """An error the upstream sent in-band; its own code/type goes into ``details``."""

    code = "upstream_error"

    def __init__(self, message: str, *, details: Any = None, retryable: bool | None = None) -> None:
        super().__init__(
            message or "The upstream reported an error.", retryable=retryable, details=details
        )


class UpstreamEventTooLarge(ProviderError):
    code = "upstream_event_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"An upstream event exceeded {limit} bytes.", retryable=False, details={"limit": limit}
        )


class WaitTimeout(ProviderError):
    """The run waited on the app (approval, tool result) longer than ``wait_timeout_seconds``."""

    code = "wait_timeout"

    def __init__(self, seconds: float | None = None) -> None:
        message = "The run waited on the app too long."
        if seconds is not None:
            message = f"The run waited on the app longer than {seconds:g} s."
        super().__init__(message, retryable=False)


class AbortError(Exception):
    """The run's abort signal fired; ``reason`` is ``aborted`` | ``interrupted`` | ``shutdown``."""

    def __init__(self, reason: AbortReason = "aborted") -> None:
        super().__init__(
            f"The run was {reason}." if reason != "aborted" else "The run was aborted."
        )
        self.reason: AbortReason = reason

    @classmethod
    def from_signal(cls, signal: AbortSignal) -> AbortError:
        return cls(signal.reason or "aborted")


def to_agent_error(error: BaseException) -> dict[str, Any]:
    """The ``AgentError`` for any exception. Unknown exceptions are provider bugs: only their
    type name is kept (their text may hold anything, secrets included)."""
    if isinstance(error, ProviderError):
        return error.to_agent_error()
    return {
        "code": "provider_error",
        "message": f"The provider failed ({type(error).__name__}).",
        "retryable": False,
    }


#: Key-shaped tokens an upstream may echo back (even masked) in an error body.
_KEY_PATTERN = re.compile(r"\b(?:sk|pk|rk|ak|key)[-_][A-Za-z0-9*._-]{6,}", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove credentials from ``text``: every given secret (a header value, and the token of a
    ``Bearer`` value) and anything shaped like an API key."""
    for secret in secrets:
        for value in (secret, secret.partition(" ")[2]):
            if len(value) >= 6:
                text = text.replace(value, REDACTED)
    return _KEY_PATTERN.sub(REDACTED, text)


def body_excerpt(raw: bytes, secrets: Iterable[str] = ()) -> str:
    """A short, redacted excerpt of an upstream error body (JSON compacted)."""
    text = raw[: BODY_EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    try:  # compact a JSON error body, dropping nothing but whitespace
        text = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        pass
    return redact(text, secrets)[:BODY_EXCERPT_CHARS]


@contextmanager
def map_transport_errors(signal: AbortSignal | None = None) -> Iterator[None]:
    """Map httpx / websockets / OS errors to :class:`ProviderError`; once ``signal`` is aborted,
    any error raised by the torn-down connection becomes :class:`AbortError`."""
    try:
        yield
    except (ProviderError, AbortError):
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if signal is not None and signal.aborted:
            raise AbortError.from_signal(signal) from None
        mapped = _map(exc)
        if mapped is None:
            raise
        raise mapped from None


def _map(exc: Exception) -> ProviderError | None:
    if isinstance(exc, httpx.HTTPStatusError):
        return UpstreamHTTPError(exc.response.status_code)
    if isinstance(exc, httpx.ConnectTimeout):
        return UpstreamConnectError("Timed out connecting to the upstream.")
    if isinstance(exc, httpx.ReadTimeout):
        return UpstreamIdleTimeout()
    if isinstance(exc, httpx.PoolTimeout):
        return UpstreamTimeout(
            "No upstream connection became free in time (the provider's max_connections are "
            "all in use)."
        )
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout()
    if isinstance(exc, httpx.ConnectError):
        return UpstreamConnectError()
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return UpstreamDropped("The upstream connection dropped.")
    if isinstance(exc, httpx.TransportError):
        return UpstreamConnectError(f"Upstream transport error ({type(exc).__name__}).")
    if isinstance(exc, ws_exc.InvalidStatus):
        return UpstreamHTTPError(
            exc.response.status_code, body_excerpt(bytes(exc.response.body or b""))
        )
    if isinstance(exc, ws_exc.ConnectionClosedError):
        return UpstreamDropped("The upstream WebSocket closed abnormally.")
    if isinstance(exc, ws_exc.InvalidHandshake | ws_exc.InvalidURI):
        return UpstreamConnectError(f"WebSocket handshake failed ({type(exc).__name__}).")
    if isinstance(exc, ws_exc.WebSocketException):
        return UpstreamDropped(f"WebSocket failure ({type(exc).__name__}).")
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout()
    if isinstance(exc, OSError):
        return UpstreamConnectError(f"Could not reach the upstream ({type(exc).__name__}).")
    return None
