"""The values a backend stores and returns: conversation refs, metadata, log entries, snapshots.

Plain data, shared by every backend role (:mod:`app.backends.roles`) and their callers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import orjson

from core.runs import RUN_TERMINAL_TYPES, AbortReason, QueuedCancelReason
from providers.contract import Command

__all__ = [
    "EMPTY_CURSOR",
    "AcceptedAnswer",
    "AppendDone",
    "ConversationMeta",
    "ConversationRef",
    "FrozenEntry",
    "IdempotencyRecord",
    "LogEntry",
    "LogItem",
    "QueuedRun",
    "ReadResult",
    "ReadSink",
    "RunAdopter",
    "RunControl",
    "Snapshot",
]

#: The cursor of an empty log; resuming from it yields every retained event.
EMPTY_CURSOR = "0"


class ConversationRef(NamedTuple):
    """A conversation: the caller's principal and its conversationKey.

    A named tuple, not a frozen dataclass: it keys the backend's, the follower's and the limits'
    dicts several times per delta, and a tuple hashes and compares in C (a dataclass's generated
    ``__hash__``/``__eq__`` are Python calls: BENCHMARKS.md, "Costs behind the code's shortcuts").
    """

    principal: str
    key: str

    @property
    def digest(self) -> str:
        """A hash of (principal, key), length-prefixed so no two pairs spell alike."""
        raw = f"{len(self.principal)}:{self.principal}:{self.key}".encode()
        return hashlib.sha256(raw).hexdigest()[:32]


@dataclass(slots=True)
class ConversationMeta:
    """What the gateway keeps beside the reduced state (persisted with the snapshot)."""

    session_id: str
    created_at: float
    updated_at: float
    title: str | None = None
    session_started: bool = False
    last_input: dict[str, Any] | None = None
    last_provider: str | None = None
    last_run_id: str | None = None
    #: Per-provider transcripts (protocol.md §11), keyed by provider name.
    transcripts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The ``traceparent`` of ``last_run_id``'s span (``[telemetry]``): where an abort from
    #: another instance links to, and the reaper of a lost run ends it.
    last_run_trace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sessionId": self.session_id,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "title": self.title,
            "sessionStarted": self.session_started,
            "lastInput": self.last_input,
            "lastProvider": self.last_provider,
            "lastRunId": self.last_run_id,
            "transcripts": self.transcripts,
        }
        if self.last_run_trace is not None:
            data["lastRunTrace"] = self.last_run_trace
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConversationMeta:
        return cls(
            session_id=data["sessionId"],
            created_at=data["createdAt"],
            updated_at=data["updatedAt"],
            title=data.get("title"),
            session_started=bool(data.get("sessionStarted")),
            last_input=data.get("lastInput"),
            last_provider=data.get("lastProvider"),
            last_run_id=data.get("lastRunId"),
            transcripts=dict(data.get("transcripts") or {}),
            last_run_trace=data.get("lastRunTrace"),
        )


#: Where the cursor starts in an extension's frame: after ``event: extension\nid: ``.
_EXTENSION_ID_AT = len(b"event: extension\nid: ")
#: ``len(b"id: ") + len(b"\ndata: ")``: where an event frame's JSON starts, after its cursor.
_EVENT_DATA_AFTER_CURSOR = 11
_new_object = object.__new__
_dumps = orjson.dumps


#: ``LogEntry.frozen()``: (sse, data offset, kind, event type, run id).
FrozenEntry = tuple[bytes, int, Literal["event", "extension"], str | None, str | None]


class LogEntry:
    """One log entry: an AgentEvent or an extension value, serialized once.

    The entry keeps one buffer, its SSE frame (built once, when logged, and shared by every
    subscriber); ``data``, the JSON of the event (or of ``{"key", "value"}``), and ``cursor``
    are read back from it. The WebSocket frame is built from it at most once.
    """

    __slots__ = ("_data_at", "_ws", "event_type", "kind", "run_id", "sse")

    def __init__(
        self,
        cursor: str,
        kind: Literal["event", "extension"],
        data: bytes,
        event_type: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.kind = kind
        self.event_type = event_type
        self.run_id = run_id
        head = b"" if kind == "event" else b"event: extension\n"
        cursor_bytes = cursor.encode()
        #: The SSE frame: no ``event:`` line for AgentEvents, ``event: extension`` otherwise.
        #: Built by ``%`` on a right-sized allocation (``orjson.dumps`` answers on a >= 4 KiB
        #: buffer, which a retained entry must not pin).
        self.sse: bytes = b"%sid: %s\ndata: %s\n\n" % (head, cursor_bytes, data)
        self._data_at = len(head) + len(cursor_bytes) + _EVENT_DATA_AFTER_CURSOR
        self._ws: str | None = None

    @classmethod
    def for_event(cls, cursor: str, event: dict[str, Any]) -> LogEntry:
        return cls.for_event_at(cursor.encode(), event)

    @classmethod
    def for_event_at(cls, cursor: bytes, event: dict[str, Any]) -> LogEntry:
        """``for_event`` from the cursor's bytes: the frame in one ``%``, no generic ``__init__``
        (one per logged event, cheaper than ``for_event``'s former path: BENCHMARKS.md, "Costs
        behind the code's shortcuts")."""
        entry: LogEntry = _new_object(cls)
        entry.kind = "event"
        entry.event_type = event.get("type")
        entry.run_id = event.get("runId")
        entry.sse = b"id: %s\ndata: %s\n\n" % (cursor, _dumps(event))
        entry._data_at = len(cursor) + _EVENT_DATA_AFTER_CURSOR
        entry._ws = None
        return entry

    @classmethod
    def of_logged(
        cls,
        cursor: bytes,
        kind: Literal["event", "extension"],
        data: bytes,
        event_type: str | None,
        run_id: str | None,
    ) -> LogEntry:
        """The entry of ``data`` already serialized (a Redis stream entry), built as
        ``for_event_at`` builds one: no generic ``__init__``, the frame in one ``%``."""
        entry: LogEntry = _new_object(cls)
        entry.kind = kind
        entry.event_type = event_type
        entry.run_id = run_id
        if kind == "event":
            entry.sse = b"id: %s\ndata: %s\n\n" % (cursor, data)
            entry._data_at = len(cursor) + _EVENT_DATA_AFTER_CURSOR
        else:
            entry.sse = b"event: extension\nid: %s\ndata: %s\n\n" % (cursor, data)
            entry._data_at = _EXTENSION_ID_AT + len(cursor) + 7
        entry._ws = None
        return entry

    @classmethod
    def for_extension(cls, cursor: str, key: str, value: Any) -> LogEntry:
        return cls(cursor, "extension", orjson.dumps({"key": key, "value": value}))

    def frozen(self) -> FrozenEntry:
        """The entry as a tuple of atomic values: the collector stops tracking such a tuple at
        its first collection, so a retained log costs no full collection any work."""
        return (self.sse, self._data_at, self.kind, self.event_type, self.run_id)

    @classmethod
    def thaw(cls, frozen: FrozenEntry) -> LogEntry:
        """The entry ``frozen()`` gave (its WebSocket frame is built again when asked for)."""
        entry: LogEntry = _new_object(cls)
        entry.sse, entry._data_at, entry.kind, entry.event_type, entry.run_id = frozen
        entry._ws = None
        return entry

    @property
    def cursor(self) -> str:
        """The entry's position, read back from its frame's ``id:`` line (not kept as a string
        of its own, which a full log would hold as many times as it keeps entries
        (BENCHMARKS.md, "Costs behind the code's shortcuts"))."""
        start = 4 if self.kind == "event" else _EXTENSION_ID_AT
        return self.sse[start : self._data_at - 7].decode()

    @property
    def data(self) -> bytes:
        """The JSON of the event (or of ``{"key", "value"}``)."""
        return self.sse[self._data_at : -2]

    @property
    def is_run_terminal(self) -> bool:
        return self.event_type in RUN_TERMINAL_TYPES

    @property
    def ws(self) -> str:
        """The WebSocket text frame."""
        if self._ws is None:
            cursor = orjson.dumps(self.cursor).decode()
            body = self.data.decode()
            if self.kind == "event":
                self._ws = f'{{"type":"event","cursor":{cursor},"event":{body}}}'
            else:
                self._ws = f'{{"type":"extension","cursor":{cursor},{body[1:]}'
        return self._ws

    def decoded(self) -> Any:
        return orjson.loads(self.data)


class LogItem:
    """One item of an append batch: an AgentEvent, or (``event`` None) an extension value.

    ``checked``: the runner checked this very event (protocol.md §6) and the gateway handed it
    on unchanged, so a backend's store may skip its own validation of it (the reducer's rules
    still apply). Events the gateway builds itself are never marked. A plain slotted class:
    one is built per event, and a frozen dataclass's ``__init__`` cost 2.5 times as much.
    """

    __slots__ = ("checked", "event", "key", "value")

    def __init__(
        self,
        event: dict[str, Any] | None = None,
        key: str = "",
        value: Any = None,
        *,
        checked: bool = False,
    ) -> None:
        self.event = event
        self.key = key
        self.value = value
        self.checked = checked

    def __repr__(self) -> str:
        if self.event is not None:
            return f"LogItem(event={self.event!r}, checked={self.checked})"
        return f"LogItem(key={self.key!r}, value={self.value!r})"

    @classmethod
    def of_event(cls, event: dict[str, Any]) -> LogItem:
        return cls(event)

    @classmethod
    def of_checked_event(cls, event: dict[str, Any]) -> LogItem:
        """An event the runner checked and the gateway did not change since."""
        return cls(event, checked=True)

    @classmethod
    def of_extension(cls, key: str, value: Any) -> LogItem:
        return cls(None, key, value)


@dataclass(slots=True)
class ReadResult:
    """What one read found. Not frozen: a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__`` (slower), and a follower builds one per delivery."""

    status: Literal["ok", "trimmed", "unknown"]
    entries: list[LogEntry] = field(default_factory=list)


#: Takes entries appended while a read waits right before them, in the appending task, and
#: returns whether it took them (see ``EventReader.read``). It must not block or await.
ReadSink = Callable[[list["LogEntry"]], bool]

#: Told how an ``append_soon`` ended, once: ``(entries, None)`` when logged, ``(None, error)``
#: when not (the error ``append_batch`` would have raised).
AppendDone = Callable[[list["LogEntry"] | None, Exception | None], None]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A reduced state with the cursor of the last event it contains."""

    state: dict[str, Any]
    cursor: str
    extensions: dict[str, Any]
    meta: ConversationMeta


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    fingerprint: str
    status: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AcceptedAnswer:
    """The answer of a run accepted under an ``Idempotency-Key``: the backend stores it with
    the conversation in the same atomic step that accepts the run (its claim or its ticket),
    so a retry finds that run even if the accepting instance died before it answered."""

    scope: str
    record: IdempotencyRecord
    ttl: float


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """An accepted run waiting for its turn, as the backend keeps it: everything needed to start
    it (on Redis, stored with its ticket so another instance can start it)."""

    run_id: str
    input: dict[str, Any]
    provider: str
    emit_user_message: bool = True
    #: Cancelled before it started: it logs its cancellation in its turn.
    cancelled: QueuedCancelReason | None = None
    #: The ``traceparent`` of the request that accepted it (``[telemetry]``), else None.
    trace: str | None = None


#: Told of queued runs this instance adopted from a dead one, with the conversation's queue
#: order (run ids, first to last); answers False to decline them (shutting down).
RunAdopter = Callable[[ConversationRef, Sequence[QueuedRun], Sequence[str]], bool]


class RunControl(Protocol):
    """The owner's handle on a claimed run: where aborts and commands are delivered."""

    run_id: str

    def abort(self, reason: AbortReason) -> bool:
        """False when the run's end is already decided (the abort comes too late)."""
        ...

    def deliver(self, command: Command) -> None: ...
