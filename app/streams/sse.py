"""SSE responses (sse-starlette): frames exactly as http-api.md specifies.

AgentEvent frames carry ``id:`` and ``data:`` only; snapshots are ``event: snapshot``;
extensions ``event: extension``. The first frame also carries ``retry:``. Heartbeats are
``: ping`` comments. A send blocked longer than ``send_timeout_seconds`` drops the subscriber
(it can resume with Last-Event-ID); the run is never affected.

A stalled subscriber pins a bounded amount, whatever the run's length: the transport is written
only while it is not paused (or by one send of at most ``COALESCE_BYTES`` past its high-water
mark), the follower holds one batch, and once it fell behind the log it gets the snapshot where
the log resumes. One whose connection closed builds nothing more (see ``follow``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any

from sse_starlette.event import ServerSentEvent, ensure_bytes
from sse_starlette.sse import EventSourceResponse, SendTimeoutError
from starlette.types import Receive, Scope, Send

from app.backends import ConversationRef, LogEntry
from app.compat import uvicorn_fast
from app.gateway import Gateway
from app.streams.follow import BATCH, Follow, follow_batches
from app.streams.snapshot import snapshot_sse_parts
from providers.transports.network import wait_within

__all__ = ["RETRY_MS", "SERVER_SEND_EXTENSION", "TRANSPORT_EXTENSION", "sse_response"]

logger = logging.getLogger("app.sse")
#: The reconnection delay suggested to EventSource clients.
RETRY_MS = 2000
_sse_of = operator.attrgetter("sse")
#: Upper bound of one coalesced send (a single larger frame is sent alone, in pieces). 64 KiB:
#: a follower of a busy conversation gets everything logged since its last read (up to
#: ``BATCH`` deltas of a few hundred bytes each) in one send, and a stalled subscriber still
#: pins at most this much past its transport's high-water mark.
COALESCE_BYTES = 64 * 1024
#: Set by ``app.factory.GatewayApp``: the connection's transport.
TRANSPORT_EXTENSION = "gateway.transport"
#: Set by ``app.factory.GatewayApp``: the server's own ``send``, under every middleware.
SERVER_SEND_EXTENSION = "gateway.server_send"


async def _ends_quietly(child: Awaitable[None]) -> None:
    """Await one of the response's tasks; its cancellation ends it normally.

    A task that ends cancelled keeps its CancelledError, whose traceback holds the finished
    frames' locals (the response, the connection's protocol and transport): a reference cycle
    that only a full collection frees.
    """
    try:
        await child
    except asyncio.CancelledError:
        pass


async def _send_within(send: Awaitable[None], seconds: float | None) -> None:
    """Await one send; past ``seconds`` cancel it and raise ``SendTimeoutError``.

    A timer per send (cancelled when the send returns, at once unless the transport is paused)
    instead of a cancel scope per send: with hundreds of subscribers every send counts.
    """
    await wait_within(send, seconds, SendTimeoutError)


class _Pusher:
    """Writes a follower's batch from the appending task (``follow._Sink``): through the
    server's own ``send``, and only when that send cannot wait (the transport is not paused
    for writing), so it returns without suspending (``uvicorn_fast.send_now``).

    Only on uvicorn's fast path (``app/compat/uvicorn_fast.py``), only a batch that is one send
    (one frame, or frames joined under ``COALESCE_BYTES``), and only once the response has sent
    its first frame (``retry:``, the snapshot if any) and no other send is in progress.
    """

    __slots__ = ("busy", "disconnected", "flow", "ready", "server_send", "transport")

    def __init__(self) -> None:
        self.server_send: Send | None = None
        self.flow: uvicorn_fast.Flow | None = None
        self.transport: asyncio.Transport | None = None
        self.ready = False
        #: The response's send lock (a heartbeat's send may be waiting on a paused transport).
        self.busy: asyncio.Lock | None = None
        #: Set once the client's ``http.disconnect`` arrived.
        self.disconnected = False

    def gone(self) -> bool:
        """The connection is closed or closing (the client left, or it was dropped)."""
        if self.disconnected:
            return True
        transport = self.transport
        return transport is not None and transport.is_closing()

    def __call__(self, entries: list[LogEntry]) -> bool:
        flow = self.flow
        if (
            not self.ready
            or flow is None
            or flow.write_paused
            or self.server_send is None
            or (self.busy is not None and self.busy.locked())
        ):
            return False
        sends = _sends(entries)
        if not isinstance(sends, tuple):
            sends = tuple(sends)
            if len(sends) != 1:
                return False
        message = {"type": "http.response.body", "body": sends[0], "more_body": True}
        return uvicorn_fast.send_now(self.server_send, message)


class _Sender:
    """Sends the body chunks of one SSE response: ``await sender(chunk)``.

    With uvicorn's flow control (the fast path), a send that cannot block (the transport is
    not paused, no other send in progress) is not timed: with hundreds of subscribers, a timer
    armed and cancelled per send is a share of the fan-out's CPU. Any other send holds the lock
    (a large frame's pieces and a heartbeat never interleave) and drops the subscriber past
    ``timeout`` (``SendTimeoutError``).
    """

    __slots__ = ("flow", "lock", "send", "timeout")

    def __init__(self, send: Send, flow: uvicorn_fast.Flow | None, timeout: float | None) -> None:
        self.send = send
        self.flow = flow
        self.timeout = timeout
        self.lock = asyncio.Lock()

    async def __call__(self, chunk: bytes | memoryview) -> None:
        message = {"type": "http.response.body", "body": chunk, "more_body": True}
        flow = self.flow
        if flow is not None and not flow.write_paused and not self.lock.locked():
            await self.send(message)
            return
        async with self.lock:
            await _send_within(self.send(message), self.timeout)


class _GatewayEventSource(EventSourceResponse):
    """sse-starlette's response (headers, ping encoding) with the gateway's own ASGI
    ``__call__``: the body through the server's ``send`` when uvicorn's fast path applies,
    heartbeats only after the first frame of a fresh stream, a stalled subscriber dropped
    past ``send_timeout`` (aborted on the fast path), the slot freed at the end."""

    gateway: Gateway
    ref: ConversationRef
    #: The subscriber slot taken in ``sse_response`` (freed when the response ends).
    slot: str | None
    #: Set by the first body frame when the stream opens with its snapshot (no resume point):
    #: heartbeats wait for it, so a slow snapshot (a loaded Redis) never lets a ``: ping`` come
    #: first. A resumed stream may wait long for its first event: its heartbeats never wait.
    first_frame: asyncio.Event | None = None
    #: Writes followed entries from the appending task (see :class:`_Pusher`).
    pusher: _Pusher | None = None
    #: The frames to send (``body_iterator``, typed).
    frames: AsyncGenerator[bytes | memoryview, None]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.get("extensions", {})
        server_send: Send | None = extensions.get(SERVER_SEND_EXTENSION)
        connection = None if server_send is None else uvicorn_fast.connection_of(server_send)
        if connection is None:
            server_send = None
        if self.pusher is not None and connection is not None:
            self.pusher.server_send = server_send
            self.pusher.flow, self.pusher.transport = connection.flow, connection.transport
        try:
            with self.gateway.metrics.track_subscriber("sse"):
                await self._serve(scope, receive, send, server_send, connection)
        except* SendTimeoutError:
            # The stream's send and a heartbeat's may both time out: a group of two.
            self.gateway.metrics.subscriber_dropped("sse")
            logger.info("dropped a subscriber whose send blocked past the send timeout")
            # Free what the socket buffer pins now: a graceful close would wait for the
            # stalled peer to read it. The subscriber resumes with Last-Event-ID.
            if connection is not None:
                connection.transport.abort()
        finally:
            await self.gateway.runs.limits.release_subscriber(self.ref, self.slot)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        server_send: Send | None,
        connection: uvicorn_fast.Connection | None,
    ) -> None:
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        await send(start)  # through the middleware: they act on the response start
        if scope.get("method", "GET").upper() == "HEAD":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        # Body messages go to the server's send directly when it is uvicorn's: the middleware
        # wrappers only act on the response start.
        deliver = _Sender(
            send if server_send is None else server_send,
            None if connection is None else connection.flow,
            self.send_timeout,
        )
        if self.pusher is not None:
            self.pusher.busy = deliver.lock
        children = [asyncio.ensure_future(_ends_quietly(self._stream(deliver, send)))]
        if self.ping_interval > 0:
            children.append(asyncio.ensure_future(_ends_quietly(self._heartbeat(deliver))))
        children.append(asyncio.ensure_future(_ends_quietly(self._listen(receive))))
        try:
            await asyncio.wait(children, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for child in children:
                child.cancel()
            await asyncio.wait(children)
        errors = [exc for child in children if (exc := child.exception()) is not None]
        del children
        if not errors:
            return
        error = errors[0] if len(errors) == 1 else BaseExceptionGroup("SSE response", errors)
        del errors
        try:
            raise error
        finally:
            del error  # not kept by this frame, which the error's traceback holds

    async def _stream(self, deliver: _Sender, send: Send) -> None:
        frames = self.frames
        try:
            async for chunk in frames:
                first = self.first_frame
                if first is not None:
                    self.first_frame = None
                    first.set()
                await deliver(chunk)
        except BaseException:
            # Suspended at a yield: close it so its cleanup (the follower's count) runs now.
            with contextlib.suppress(Exception):
                await frames.aclose()
            raise
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _heartbeat(self, deliver: _Sender) -> None:
        first = self.first_frame
        if first is not None:
            await first.wait()
        factory = self.ping_message_factory or _ping
        while True:
            await asyncio.sleep(self.ping_interval)
            await deliver(ensure_bytes(factory(), self.sep))

    async def _listen(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.pusher is not None:
            self.pusher.disconnected = True


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


def _pieces(frame: bytes) -> Iterator[bytes | memoryview]:
    """``frame`` in sends of at most ``COALESCE_BYTES`` (views: no copy until written).

    One large frame (a snapshot, an event near ``max_upstream_event_bytes``) written in one send
    would be copied whole into a stalled subscriber's transport buffer; in pieces, each send
    waits for the buffer to drain, so a stalled subscriber pins about one high-water mark.
    """
    if len(frame) <= COALESCE_BYTES:
        yield frame
        return
    view = memoryview(frame)
    for start in range(0, len(frame), COALESCE_BYTES):
        yield view[start : start + COALESCE_BYTES]


#: Recent single-send joins, by the identity of their first entry (at most ``JOINED_SLOTS``,
#: each at most ``COALESCE_BYTES``). Followers that read the same range of the log (same first
#: and last entry objects, same length: the same contiguous entries) send the same bytes,
#: joined once: hundreds of followers woken by one append read the same entries.
_joined: dict[int, tuple[LogEntry, LogEntry, int, bytes]] = {}
JOINED_SLOTS = 16


def _coalesced(entries: list[LogEntry]) -> Iterator[bytes | memoryview]:
    """The frames of ``entries`` joined into sends of at most ~``COALESCE_BYTES`` each.

    A subscriber that is behind gets what was logged since its last read in few sends (each
    frame serialized once, when logged; here only joined, once per range of the log for all
    the followers that read it). The byte cap keeps what one send can pin in a stalled
    subscriber's transport buffer small, whatever the frame sizes.
    """
    count = len(entries)
    if not count:
        return
    first, last = entries[0], entries[-1]
    if count > 1:
        hit = _joined.get(id(first))
        if hit is not None and hit[0] is first and hit[1] is last and hit[2] == count:
            yield hit[3]
            return
    frames = list(map(_sse_of, entries))
    if sum(map(len, frames)) <= COALESCE_BYTES:  # the common case, without a Python loop
        if count == 1:
            yield frames[0]
            return
        joined = b"".join(frames)
        if len(_joined) >= JOINED_SLOTS:
            _joined.clear()
        _joined[id(first)] = (first, last, count, joined)
        yield joined
        return
    group: list[bytes] = []
    size = 0
    for frame in frames:
        if group and size + len(frame) > COALESCE_BYTES:
            yield group[0] if len(group) == 1 else b"".join(group)
            group, size = [], 0
        if len(frame) > COALESCE_BYTES:
            yield from _pieces(frame)
            continue
        group.append(frame)
        size += len(frame)
    if group:
        yield group[0] if len(group) == 1 else b"".join(group)


def _sends(entries: list[LogEntry]) -> Iterable[bytes | memoryview]:
    """What ``_coalesced`` yields; one small entry (a stream at 50 deltas/s: one per read)
    without its generator and sums."""
    if len(entries) == 1:
        frame = entries[0].sse
        if len(frame) <= COALESCE_BYTES:
            return (frame,)
    return _coalesced(entries)


class _SharedFrame:
    """A serialized snapshot frame, shared by the subscribers that start from it: one part
    (one send), or for a large snapshot its head, its JSON as serialized, and its end."""

    __slots__ = ("__weakref__", "cursor", "parts")

    def __init__(self, parts: tuple[bytes, ...], cursor: str) -> None:
        self.parts = parts
        self.cursor = cursor


def _snapshot_parts(body: dict[str, Any], retry: bool) -> tuple[bytes, ...]:
    """The parts of ``body``'s frame: joined when small (the common case, one send); a large
    one is sent from its JSON in pieces, never copied whole."""
    head, data, tail = snapshot_sse_parts(body, RETRY_MS if retry else None)
    if len(head) + len(data) + len(tail) <= COALESCE_BYTES:
        return (b"".join((head, data, tail)),)
    return head, data, tail


#: Per gateway: (conversation, with retry) -> the newest snapshot frame a subscriber is still
#: sending (weak values: freed when the last one is done). A subscriber that needs a snapshot
#: while one is in flight takes that frame and the log entries after its cursor instead of
#: serializing its own: N subscribers joining a large conversation (even during a run, when
#: each would see another cursor) hold one copy of the snapshot, not N.
_snapshots: weakref.WeakKeyDictionary[
    Gateway, weakref.WeakValueDictionary[tuple[ConversationRef, bool], _SharedFrame]
] = weakref.WeakKeyDictionary()
#: At most this many log entries are sent after a shared snapshot to catch up.
CATCH_UP_ENTRIES = 4 * BATCH


async def _entries_between(
    gateway: Gateway, ref: ConversationRef, start: str, end: str
) -> list[LogEntry] | None:
    """The log entries after ``start`` up to and including ``end``; None when not all are
    retained (or too many): the caller then serializes a snapshot of its own."""
    out: list[LogEntry] = []
    pos = start
    while len(out) < CATCH_UP_ENTRIES:
        result = await gateway.backend.read(ref, pos, limit=BATCH, wait=0)
        if result.status != "ok" or not result.entries:
            return None
        for entry in result.entries:
            out.append(entry)
            if entry.cursor == end:
                return out
        pos = result.entries[-1].cursor
    return None


async def _snapshot_frames(
    gateway: Gateway, ref: ConversationRef, body: dict[str, Any], retry: bool
) -> AsyncIterator[bytes | memoryview]:
    """The snapshot ``body`` (at its cursor) as frames: a shared one when possible."""
    frames = _snapshots.get(gateway)
    if frames is None:
        frames = _snapshots[gateway] = weakref.WeakValueDictionary()
    cursor = str(body["cursor"])
    shared = frames.get((ref, retry))
    gap: list[LogEntry] = []
    if shared is not None and shared.cursor != cursor:
        found = await _entries_between(gateway, ref, shared.cursor, cursor)
        if found is None:
            shared = None
        else:
            gap = found
    if shared is None:
        shared = _SharedFrame(_snapshot_parts(body, retry), cursor)
        frames[(ref, retry)] = shared
    del body
    for part in shared.parts:
        for piece in _pieces(part):
            yield piece
    del shared
    for frame in _coalesced(gap):
        yield frame


async def _frames(
    gateway: Gateway, ref: ConversationRef, spec: Follow, pusher: _Pusher | None = None
) -> AsyncGenerator[bytes | memoryview, None]:
    retry: bytes | None = b"retry: %d\n" % RETRY_MS
    gone = None if pusher is None else pusher.gone
    async for item in follow_batches(gateway, ref, spec, pusher, gone):
        if isinstance(item, dict):
            with_retry, retry = retry is not None, None
            # Handed over: the snapshot object is freed once its frame is serialized.
            pieces = _snapshot_frames(gateway, ref, item, with_retry)
            del item
            async for piece in pieces:
                yield piece
            del pieces
        else:
            for frame in _sends(item):
                if retry is not None:
                    frame, retry = retry + frame, None
                yield frame
        if pusher is not None and not pusher.ready:
            # Resumed after the last yield: every frame so far was sent, the first with its
            # ``retry:`` (a heartbeat may have gone before it: it does not count).
            pusher.ready = True


async def sse_response(
    gateway: Gateway,
    ref: ConversationRef,
    spec: Follow,
    headers: Mapping[str, str] | None = None,
    *,
    taken: tuple[str | None] | None = None,
) -> EventSourceResponse:
    """An SSE response following the conversation's log as ``spec`` says (``headers`` added).
    Its subscriber slot is taken here, or was by the caller (``taken``: the slot's token, a
    run start's stream takes it with the run's first round trip); freed when it ends."""
    settings = gateway.settings.gateway
    if taken is None:
        slot = await gateway.runs.limits.acquire_subscriber(ref)  # 429; freed in __call__
    else:
        (slot,) = taken
    pusher = _Pusher()
    frames = _frames(gateway, ref, spec, pusher)
    response = _GatewayEventSource(
        frames,
        headers={"Cache-Control": "no-cache", **(headers or {})},
        ping=settings.heartbeat_seconds,
        ping_message_factory=_ping,
        send_timeout=settings.send_timeout_seconds,
        sep="\n",
    )
    if spec.since is None and spec.start is None:
        response.first_frame = asyncio.Event()
    response.pusher = pusher
    response.frames = frames
    response.gateway = gateway  # metrics: subscribers by transport, dropped subscribers
    response.ref = ref
    response.slot = slot
    return response
