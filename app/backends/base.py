"""The backend interface: where a conversation's log, snapshot, run ownership and control live.

One interface, two implementations (ARCHITECTURE decision 6): memory (embedded default) and
Redis. The contract, pinned by ``tests/app/backend_contract.py``:

- **Log and state agree.** ``append_event`` reduces the event into the conversation's state and
  appends it to the log in one step (one writer per conversation: the run owner), so
  ``snapshot()`` always returns a state together with the cursor of the last event it contains.
- **Cursors** are opaque strings, strictly increasing per conversation; ``EMPTY_CURSOR`` is the
  position of an empty log (valid for every conversation). A cursor encodes the conversation's
  incarnation: after ``delete`` (or from another conversation) it reads as ``unknown``.
- **Reads** never lose or repeat: ``read(after=c)`` returns the entries after ``c`` in order;
  ``trimmed`` when entries after ``c`` were dropped by retention, ``unknown`` when ``c`` is not a
  position of this incarnation. Readers wait (bounded by ``wait``) for new entries.
- **Run ownership**: ``claim_run`` gives one run at a time per conversation a slot, with a
  :class:`RunControl` through which aborts and commands posted anywhere reach the owner.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson

from providers.contract import Command

if TYPE_CHECKING:
    from app.backends.limit_store import LimitStore

__all__ = [
    "EMPTY_CURSOR",
    "Backend",
    "ConversationMeta",
    "ConversationRef",
    "IdempotencyRecord",
    "LogEntry",
    "ReadResult",
    "RunControl",
    "Snapshot",
]

#: The cursor of an empty log; resuming from it yields every retained event.
EMPTY_CURSOR = "0"

TERMINAL_TYPES = frozenset({"run.completed", "run.failed", "run.cancelled"})


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """A conversation: the caller's principal and its conversationKey."""

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

    def to_dict(self) -> dict[str, Any]:
        return {
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
        )


class LogEntry:
    """One log entry: an AgentEvent or an extension value, serialized once.

    The entry keeps one buffer, its SSE frame (built once, when logged, and shared by every
    subscriber); ``data``, the JSON of the event (or of ``{"key", "value"}``), is read back
    from it. The WebSocket frame is built from it at most once.
    """

    __slots__ = ("_data_at", "_ws", "cursor", "event_type", "kind", "run_id", "sse")

    def __init__(
        self,
        cursor: str,
        kind: Literal["event", "extension"],
        data: bytes,
        event_type: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.cursor = cursor
        self.kind = kind
        self.event_type = event_type
        self.run_id = run_id
        head = b"" if kind == "event" else b"event: extension\n"
        cursor_bytes = cursor.encode()
        #: The SSE frame: no ``event:`` line for AgentEvents, ``event: extension`` otherwise.
        #: Built by ``%`` on a right-sized allocation (``orjson.dumps`` answers on a >= 4 KiB
        #: buffer, which a retained entry must not pin).
        self.sse: bytes = b"%sid: %s\ndata: %s\n\n" % (head, cursor_bytes, data)
        self._data_at = len(head) + len(cursor_bytes) + 11  # "id: " + "\ndata: "
        self._ws: str | None = None

    @classmethod
    def for_event(cls, cursor: str, event: dict[str, Any]) -> LogEntry:
        return cls(cursor, "event", orjson.dumps(event), event.get("type"), event.get("runId"))

    @classmethod
    def for_extension(cls, cursor: str, key: str, value: Any) -> LogEntry:
        return cls(cursor, "extension", orjson.dumps({"key": key, "value": value}))

    @property
    def data(self) -> bytes:
        """The JSON of the event (or of ``{"key", "value"}``)."""
        return self.sse[self._data_at : -2]

    @property
    def is_run_terminal(self) -> bool:
        return self.event_type in TERMINAL_TYPES

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


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: Literal["ok", "trimmed", "unknown"]
    entries: list[LogEntry] = field(default_factory=list)


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


class RunControl(Protocol):
    """The owner's handle on a claimed run: where aborts and commands are delivered."""

    run_id: str

    def abort(self, reason: Literal["aborted", "interrupted", "shutdown"]) -> bool:
        """False when the run's end is already decided (the abort comes too late)."""
        ...

    def deliver(self, command: Command) -> None: ...


class Backend(ABC):
    """Storage and control of conversations. All methods are coroutines except ``wake_readers``."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def ping(self) -> bool:
        """True when the backend is reachable (readiness)."""

    # --- conversations -------------------------------------------------------------------
    @abstractmethod
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        """Create the conversation with ``meta`` unless it exists. True when created."""

    @abstractmethod
    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None: ...

    @abstractmethod
    async def save_meta(self, ref: ConversationRef, meta: ConversationMeta) -> None:
        """Replace the meta of the conversation's incarnation that ``meta.session_id`` names;
        nothing when the conversation was deleted (or deleted and created again) meanwhile."""

    @abstractmethod
    async def delete(self, ref: ConversationRef) -> bool:
        """Drop state and log; open readers then see their cursor as unknown. True if it existed."""

    @abstractmethod
    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        """The principal's conversations as ``(key, meta)``, in no particular order."""

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        """Count ``ref`` among its principal's conversations unless ``limit`` are held already
        (True when it exists or was counted). Atomic with other reservations: ``limit`` is never
        exceeded, also under concurrent requests on several instances. One instance (memory):
        nothing awaits between this count and the ``create_conversation`` that follows it."""
        if await self.get_meta(ref) is not None:
            return True
        return len(await self.list_conversations(ref.principal)) < limit

    def limit_store(self) -> LimitStore | None:
        """Where the ``[limits]`` counters live when instances share them (None: the
        gateway's own in-process counters)."""
        return None

    # --- log and state -------------------------------------------------------------------
    @abstractmethod
    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        """Reduce ``event`` into the state and append it to the log, in one step. Refused
        (raises) for a run of another incarnation of the conversation (deleted meanwhile)."""

    @abstractmethod
    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        """Record the latest value of an extension and append it to the log."""

    @abstractmethod
    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        """The state with its cursor; None when the conversation does not exist."""

    @abstractmethod
    async def head_cursor(self, ref: ConversationRef) -> str:
        """The cursor of the last entry (``EMPTY_CURSOR`` when there is none)."""

    @abstractmethod
    async def read(
        self, ref: ConversationRef, after: str, *, limit: int, wait: float
    ) -> ReadResult:
        """Entries after ``after`` (at most ``limit``); waits up to ``wait`` s for the first."""

    @abstractmethod
    def wake_readers(self) -> None:
        """Wake every waiting ``read`` of this process (used at shutdown)."""

    # --- runs ----------------------------------------------------------------------------
    @abstractmethod
    async def claim_run(self, ref: ConversationRef, control: RunControl) -> bool:
        """Take the conversation's run slot for ``control.run_id``; False when it is taken."""

    @abstractmethod
    async def release_run(self, ref: ConversationRef, run_id: str) -> None: ...

    @abstractmethod
    async def active_run(self, ref: ConversationRef) -> str | None:
        """The run id holding the slot, if any."""

    @abstractmethod
    async def request_abort(
        self,
        ref: ConversationRef,
        run_id: str | None,
        reason: Literal["aborted", "interrupted", "shutdown"] = "aborted",
    ) -> str | None:
        """Ask the owner of the active run (or of ``run_id`` if active) to abort it; a queued
        ``run_id`` (in the backend's queue) is cancelled and ends in its turn.

        Returns the run id when a running or queued run was asked, None when nothing matched.
        """

    @abstractmethod
    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        """Deliver ``command`` to the owner of ``run_id``; False when that run is not active."""

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        """Decide the end of ``run_id`` (its owner is about to log its terminal event): the
        reason of an abort another instance requested before now, else None, and from now on
        such aborts answer None. Atomic with ``request_abort``, so an abort answered with the
        run id always ends the run ``run.cancelled``. Aborts reaching the owner's
        :class:`RunControl` directly are decided by it (``abort`` answers False).

        One instance (memory): every abort reaches the control; nothing to decide here."""
        return None

    # --- the queue of enqueued runs (multitask "enqueue" / "interrupt") ----------------------
    # One instance (memory): the RunManager's own per-conversation queue is the whole queue, so
    # these defaults do nothing. Several instances (Redis): the queue is kept in the backend,
    # so runs start in arrival order cluster-wide and the bound counts every instance's runs.
    async def enqueue_run(
        self, ref: ConversationRef, run_id: str, *, limit: int | None, interrupt: bool = False
    ) -> bool:
        """Queue ``run_id`` last; False when ``limit`` runs wait. With ``interrupt`` every run
        already waiting is cancelled (it still takes the slot in its turn, already aborted).

        Until it is first, ``claim_run`` refuses it; while runs wait, it refuses a run that
        was not queued. A run cancelled while queued gets its control aborted by its claim.
        """
        return True

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        """Return once the conversation's run slot may have been freed (a run released it,
        a queued run left the queue), or after ``wait`` s: a run waiting for its turn
        waits on this, not by polling ``claim_run``."""
        await asyncio.sleep(wait)

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        """Remove a queued run (aborted before it started); True when it was queued."""
        return False

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        """True when this instance's queued ``run_id`` was removed elsewhere (abort, delete)."""
        return False

    async def queued_runs(self, ref: ConversationRef) -> int:
        """How many runs wait in the backend's queue (of every instance; ``untilIdle``)."""
        return 0

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        """``run_id`` waits in the backend's queue or holds the slot and is starting."""
        return False

    # --- idempotency ---------------------------------------------------------------------
    @abstractmethod
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None: ...

    @abstractmethod
    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        """Store ``record`` unless the scope already has one; True when stored."""
