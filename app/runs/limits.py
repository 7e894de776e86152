"""The ``[limits]`` of http-api.md that the gateway enforces itself, each with its error code.

- runs per principal per minute: sliding 60 s window, 429 ``rate_limited`` + ``Retry-After``;
- conversations per principal: a new conversation beyond it is 429 ``too_many_conversations``;
- concurrent subscribers (SSE + WebSocket) per conversation and per principal: 429
  ``too_many_subscribers`` (a WebSocket gets that error frame, then closes with 1013);
- inline artifact content: larger content is cut to the limit and the event's ``meta`` says so
  (``meta.truncated = {"field": "content", "originalBytes": N, "keptBytes": M}``), so one upstream
  can never grow the state without bound.

The other limits live where the data enters: ``max_body_bytes`` (413) and ``max_input_bytes``
(413) in the routes, ``max_ws_frame_bytes`` in the WebSocket session, and
``max_upstream_event_bytes`` in the providers (the run fails with ``upstream_event_too_large``).

Every counter is checked and recorded in one step: a run is counted when it is taken (and given
back when the request is refused after all), a stream slot when it opens. With a backend that
shares them (``Backend.limit_store``: Redis) the counters live there, so N instances admit what
one does; otherwise they are this process's own.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson

from app import errors
from app.backends import ConversationRef
from app.backends.limit_store import LimitStore, SubscriberRefusal
from app.config import LimitsSection

__all__ = [
    "ARTIFACT_EVENTS",
    "TRUNCATION_KEY",
    "GatewayLimits",
    "RunRateLimiter",
    "SubscriberLimits",
    "cap_artifact",
    "check_json_size",
    "ws_max_size",
]

WINDOW_SECONDS = 60.0
#: Frames up to this much above ``max_ws_frame_bytes`` get an error frame; larger ones are
#: refused by the server itself (close 1009) before they are buffered whole.
WS_FRAME_SLACK = 64 * 1024
ARTIFACT_EVENTS = frozenset({"artifact.created", "artifact.updated", "artifact.completed"})
#: The ``meta`` key of an event whose artifact content was cut.
TRUNCATION_KEY = "truncated"


class RunRateLimiter:
    """At most ``per_minute`` accepted runs per principal in any 60 s window."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._accepted: dict[str, deque[float]] = {}

    def _window(self, principal: str) -> deque[float]:
        now = self._clock()
        window = self._accepted.get(principal)
        if window is None:
            return deque()
        while window and now - window[0] >= WINDOW_SECONDS:
            window.popleft()
        if not window:
            del self._accepted[principal]
        return window

    def check(self, principal: str) -> None:
        """Raise 429 ``rate_limited`` (with ``Retry-After``) when the window is full."""
        window = self._window(principal)
        if len(window) >= self.per_minute:
            raise _rate_limited(self.per_minute, WINDOW_SECONDS - (self._clock() - window[0]))

    def record(self, principal: str) -> float:
        stamp = self._clock()
        self._accepted.setdefault(principal, deque()).append(stamp)
        return stamp

    def take(self, principal: str) -> float:
        """Check and record in one step (429 when full); the stamp to :meth:`refund`."""
        self.check(principal)
        return self.record(principal)

    def refund(self, principal: str, stamp: float) -> None:
        window = self._accepted.get(principal)
        if window is not None:
            with contextlib.suppress(ValueError):
                window.remove(stamp)


def _rate_limited(per_minute: int, wait: float) -> errors.RateLimited:
    retry = max(1, math.ceil(wait))
    return errors.RateLimited(
        f"More than {per_minute} runs per minute; retry in {retry} s.", retry_after=retry
    )


class SubscriberLimits:
    """Concurrent subscribers per conversation and per principal."""

    def __init__(self, per_conversation: int, per_principal: int) -> None:
        self.per_conversation = per_conversation
        self.per_principal = per_principal
        self.by_conversation: Counter[ConversationRef] = Counter()
        self.by_principal: Counter[str] = Counter()

    def check(self, ref: ConversationRef) -> None:
        """Raise 429 ``too_many_subscribers`` when no slot is free (takes none)."""
        if self.by_conversation[ref] >= self.per_conversation:
            raise _too_many_subscribers(f"{self.per_conversation} per conversation")
        if self.by_principal[ref.principal] >= self.per_principal:
            raise _too_many_subscribers(f"{self.per_principal} per principal")

    def acquire(self, ref: ConversationRef) -> None:
        self.check(ref)
        self.by_conversation[ref] += 1
        self.by_principal[ref.principal] += 1

    def release(self, ref: ConversationRef) -> None:
        self.by_conversation[ref] -= 1
        if self.by_conversation[ref] <= 0:
            del self.by_conversation[ref]
        self.by_principal[ref.principal] -= 1
        if self.by_principal[ref.principal] <= 0:
            del self.by_principal[ref.principal]

    @contextlib.contextmanager
    def hold(self, ref: ConversationRef) -> Iterator[None]:
        """A subscriber slot for the ``with`` block (raises 429 when none is free)."""
        self.acquire(ref)
        try:
            yield
        finally:
            self.release(ref)


def _too_many_subscribers(which: str) -> errors.TooManySubscribers:
    return errors.TooManySubscribers(
        f"Too many concurrent subscribers (at most {which}).", retry_after=1
    )


class GatewayLimits:
    """The limits one gateway enforces (``gateway.runs.limits``), in ``store`` when given
    (shared by every instance), else in this process's counters."""

    def __init__(self, limits: LimitsSection, store: LimitStore | None = None) -> None:
        self.settings = limits
        self.store = store
        self.runs = RunRateLimiter(limits.runs_per_minute_per_principal)
        self.subscribers = SubscriberLimits(
            limits.max_subscribers_per_conversation, limits.max_subscribers_per_principal
        )
        #: The streams open on this instance, per conversation, whichever backend counts them
        #: against the limits (what an operator or a test can read without asking Redis).
        self.open_streams: Counter[ConversationRef] = Counter()

    # --- runs per minute -----------------------------------------------------------------
    async def take_run(self, principal: str) -> str | float:
        """Count one run in the principal's window (429 ``rate_limited`` when full); the ticket
        to :meth:`refund_run` if the request is refused after all."""
        if self.store is None:
            return self.runs.take(principal)
        per_minute = self.settings.runs_per_minute_per_principal
        token, wait = await self.store.take_run(principal, per_minute)
        if token is None:
            raise _rate_limited(per_minute, wait)
        return token

    async def refund_run(self, principal: str, ticket: str | float) -> None:
        if isinstance(ticket, str) and self.store is not None:
            await self.store.refund_run(principal, ticket)
        elif isinstance(ticket, float):
            self.runs.refund(principal, ticket)

    # --- subscribers ---------------------------------------------------------------------
    async def check_subscriber(self, ref: ConversationRef) -> None:
        """429 ``too_many_subscribers`` when a new stream of ``ref`` would be refused."""
        if self.store is None:
            self.subscribers.check(ref)
            return
        s = self.settings
        full = await self.store.subscribers_full(
            ref, s.max_subscribers_per_conversation, s.max_subscribers_per_principal
        )
        if full is not None:
            raise self._subscribers_refused(full)

    async def acquire_subscriber(self, ref: ConversationRef) -> str | None:
        """Take a stream slot (429 ``too_many_subscribers``); the token to release it."""
        if self.store is None:
            self.subscribers.acquire(ref)
            self.open_streams[ref] += 1
            return None
        s = self.settings
        token, refused = await self.store.take_subscriber(
            ref, s.max_subscribers_per_conversation, s.max_subscribers_per_principal
        )
        if token is None:
            raise self._subscribers_refused(refused or "conversation")
        self.open_streams[ref] += 1
        return token

    async def release_subscriber(self, ref: ConversationRef, token: str | None) -> None:
        self.open_streams[ref] -= 1
        if self.open_streams[ref] <= 0:
            del self.open_streams[ref]
        if self.store is None:
            self.subscribers.release(ref)
        elif token is not None:
            with contextlib.suppress(Exception):  # backend unreachable: the slot lapses
                await self.store.free_subscriber(token)

    def _subscribers_refused(self, which: SubscriberRefusal) -> errors.TooManySubscribers:
        s = self.settings
        if which == "principal":
            return _too_many_subscribers(f"{s.max_subscribers_per_principal} per principal")
        return _too_many_subscribers(f"{s.max_subscribers_per_conversation} per conversation")

    # --- conversations -------------------------------------------------------------------
    async def check_new_conversation(
        self, ref: ConversationRef, reserve: Callable[[int], Awaitable[bool]]
    ) -> None:
        """Refuse a new conversation beyond ``max_conversations_per_principal`` (429);
        ``reserve(limit)`` counts it atomically when there is room."""
        limit = self.settings.max_conversations_per_principal
        if not await reserve(limit):
            raise errors.TooManyConversations(
                f"At most {limit} conversations per principal; delete one first.", retry_after=60
            )

    def cap_event(self, event: dict[str, Any]) -> dict[str, Any]:
        return cap_artifact(event, self.settings.max_inline_artifact_bytes)


def check_json_size(value: Any, limit: int, what: str) -> None:
    """413 ``payload_too_large`` when ``value`` as JSON exceeds ``limit`` bytes; 422
    ``invalid_request`` when it cannot be stored as JSON at all (an integer beyond 64 bits)."""
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:
        raise errors.InvalidRequest(f"{what} cannot be stored as JSON: {exc}.") from None
    if size > limit:
        raise errors.PayloadTooLarge(f"{what} is larger than {limit} bytes.")


def ws_max_size(max_ws_frame_bytes: int) -> int:
    """The server's WebSocket message cap (uvicorn ``ws_max_size``) for ``max_ws_frame_bytes``.

    A frame a little over the limit is answered with a ``payload_too_large`` error frame and the
    socket stays open; one far over it (beyond the slack) is refused by the WebSocket protocol
    layer with close 1009 instead of being buffered whole (uvicorn's default is 16 MiB).
    """
    return max_ws_frame_bytes + WS_FRAME_SLACK


def _content_bytes(content: Any) -> bytes:
    if isinstance(content, str):
        return content.encode("utf-8", "surrogatepass")
    try:
        return orjson.dumps(content)
    except TypeError:  # not JSON-able (a bug upstream): keep its text form
        return str(content).encode("utf-8", "surrogatepass")


def cap_artifact(event: dict[str, Any], limit: int) -> dict[str, Any]:
    """``event`` with its artifact ``content`` cut to ``limit`` bytes (marked in ``meta``).

    Text content keeps its first ``limit`` bytes (whole characters); structured content that
    is too large is replaced by the first ``limit`` bytes of its JSON text. Other events and
    content within the limit are returned unchanged (the same object).
    """
    if event.get("type") not in ARTIFACT_EVENTS:
        return event
    payload = event.get("payload")
    if not isinstance(payload, dict) or payload.get("content") is None:
        return event
    raw = _content_bytes(payload["content"])
    if len(raw) <= limit:
        return event
    kept = raw[:limit].decode("utf-8", "ignore")
    meta = event.get("meta")
    marker = {"field": "content", "originalBytes": len(raw), "keptBytes": len(kept.encode())}
    capped = dict(event)
    capped["payload"] = {**payload, "content": kept}
    capped["meta"] = {**(meta if isinstance(meta, dict) else {}), TRUNCATION_KEY: marker}
    return capped
