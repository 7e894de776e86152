"""The backend's roles: one small protocol per thing a caller asks of storage.

Both backends implement every role; :class:`app.backends.base.Backend` is their composition. A
caller that needs one role (the listing reads snapshots, the idempotency layer stores replies)
can name that role instead of the whole backend.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.backends.types import (
    AcceptedAnswer,
    AppendDone,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogEntry,
    LogItem,
    QueuedRun,
    ReadResult,
    ReadSink,
    RunAdopter,
    RunControl,
    Snapshot,
)
from core.runs import AbortReason
from providers.contract import Command

if TYPE_CHECKING:
    from app.backends.limit_store import LimitStore
    from app.backends.webhook_outbox import LostRunListener, WebhookOutbox

__all__ = [
    "ConversationStore",
    "EventAppender",
    "EventReader",
    "IdempotencyStore",
    "Lifecycle",
    "QueuedRuns",
    "RunSignals",
    "RunSlots",
    "Snapshots",
    "WebhookSupport",
]


class Lifecycle(Protocol):
    """Start, stop and health of the backend."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def ping(self) -> bool:
        """True when the backend is reachable (readiness)."""


class ConversationStore(Protocol):
    """Conversations and their metadata (title, session id, transcripts)."""

    @abstractmethod
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        """Create the conversation with ``meta`` unless it exists. True when created."""

    @abstractmethod
    async def restore_conversation(
        self,
        ref: ConversationRef,
        meta: ConversationMeta,
        state: dict[str, Any],
        extensions: dict[str, Any],
    ) -> bool:
        """Create the conversation with ``meta``, its reduced ``state`` and ``extensions`` and an
        empty log, in one atomic step, unless it exists (the archive brings a forgotten
        conversation back). True when created; a concurrent restore on another instance makes
        one of them False, never two copies."""

    @abstractmethod
    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None: ...

    @abstractmethod
    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        """Replace the meta of the conversation's incarnation that ``meta.session_id`` names;
        nothing when the conversation was deleted (or deleted and created again) meanwhile.
        ``keep_title``: the stored title stays (a title set meanwhile wins over ``meta``'s,
        which is updated to it)."""

    @abstractmethod
    async def delete(self, ref: ConversationRef) -> bool:
        """Drop state and log; open readers then see their cursor as unknown. True if it existed."""

    @abstractmethod
    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        """Count ``ref`` among its principal's conversations unless ``limit`` are held already
        (True when it exists or was counted). Atomic with other reservations: ``limit`` is never
        exceeded, also under concurrent requests on several instances. One instance (memory):
        nothing awaits between this count and the ``create_conversation`` that follows it."""

    @abstractmethod
    def limit_store(self) -> LimitStore | None:
        """Where the ``[limits]`` counters live when instances share them (None: the
        gateway's own in-process counters)."""

    @abstractmethod
    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        """The principal's conversations as ``(key, meta)``, in no particular order."""


class EventAppender(Protocol):
    """The run owner's writes: each event is reduced into the state and logged in one step."""

    #: The run's writer may append in the runner's task when upstream reads come apart (a
    #: slow stream), instead of handing each read to a task of its own: true when an append
    #: never suspends (memory) or takes one short round trip (Redis: a small fraction of the
    #: 20 ms between reads at 50 deltas/s, so the stream waits for nothing it would notice;
    #: BENCHMARKS.md, "Costs behind the code's shortcuts").
    inline_appends: bool = False
    #: An append waits for a round trip (Redis): a run's writer hands a read of many events to
    #: its drain task, never writing it inline (``app.runs.event_pipe.INLINE_MAX_ITEMS``), and
    #: gives the producer a loop turn before each write, so more of it goes in that write.
    appends_wait: bool = False

    @abstractmethod
    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        """Reduce ``event`` into the state and append it to the log, in one step. Refused
        (raises) for a run of another incarnation of the conversation (deleted meanwhile)."""

    @abstractmethod
    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        """Record the latest value of an extension and append it to the log."""

    @abstractmethod
    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        """Reduce and log ``items`` in order, as one write (one round trip on Redis).

        All or nothing: when it raises, none of the items is logged (or, on a lost reply that
        cannot be checked, the caller treats the run as failed, as for ``append_event``).
        """

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        """:meth:`append_batch` without waiting for it: True when the write started (the items
        are reduced into the state already), and ``done`` is then called once, from a loop
        callback, with its entries or its error; False, with nothing done, when this backend
        has no such write for ``ref`` right now (the caller awaits :meth:`append_batch`).

        For a run's writer on a backend whose appends wait for a round trip (Redis): the
        runner goes back to its upstream at once, and the entries reach the subscribers from
        the reply's callback, with no wake-up of the runner per read. A backend that wraps
        another passes it on only if it does what its ``append_batch`` adds, in ``done``.
        """
        return False


class EventReader(Protocol):
    """Reading the log from a cursor: what every stream (SSE, WebSocket, wait) follows."""

    @abstractmethod
    async def head_cursor(self, ref: ConversationRef) -> str:
        """The cursor of the last entry (``EMPTY_CURSOR`` when there is none)."""

    @abstractmethod
    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        """Entries after ``after`` (at most ``limit``); waits up to ``wait`` s for the first.

        With ``sink``, a backend may offer entries appended in this process while the read
        waits (those right after its position) to ``sink`` in the appending task, instead of
        waking the reader (memory: every append; Redis: what this instance's run writer
        feeds the window): when it takes them, the read's position moves past them and it
        keeps waiting; what it returns comes after them. The caller learns what was taken
        from its sink. Entries a backend does not offer wake the reader, as without one."""

    @abstractmethod
    def wake_readers(self) -> None:
        """Wake every waiting ``read`` of this process (used at shutdown)."""


class Snapshots(Protocol):
    """The reduced state of a conversation together with the cursor of its last event."""

    @abstractmethod
    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        """The state with its cursor; None when the conversation does not exist."""

    async def run_issues(self, ref: ConversationRef, run_id: str) -> list[dict[str, Any]]:
        """The state's protocol ``issues`` raised by ``run_id``'s events, in order (empty when the
        conversation does not exist). This default reads a snapshot; a backend holding the reducer
        in memory answers without building one (a long run's snapshot materializes megabytes of
        ``processedEventIds``: BENCHMARKS.md, "Costs behind the code's shortcuts")."""
        snapshot = await self.snapshot(ref)
        if snapshot is None:
            return []
        return [
            dict(issue)
            for issue in snapshot.state.get("issues", ())
            if isinstance(issue, dict) and issue.get("runId") == run_id
        ]


class RunSlots(Protocol):
    """One active run per conversation: claiming, releasing and naming the slot's holder."""

    @abstractmethod
    async def claim_run(
        self, ref: ConversationRef, control: RunControl, answer: AcceptedAnswer | None = None
    ) -> bool:
        """Take the conversation's run slot for ``control.run_id``; False when it is taken.
        ``answer`` (a run accepted by this claim) is stored with the claim, atomically."""

    @abstractmethod
    async def release_run(self, ref: ConversationRef, run_id: str) -> None: ...

    @abstractmethod
    async def active_run(self, ref: ConversationRef) -> str | None:
        """The run id holding the slot, if any."""

    @abstractmethod
    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        """Return once the conversation's run slot may have been freed (a run released it,
        a queued run left the queue), or after ``wait`` s: a run waiting for its turn
        waits on this, not by polling ``claim_run``."""


class RunSignals(Protocol):
    """Aborts and commands posted anywhere, delivered to the active run's owner."""

    @abstractmethod
    async def request_abort(
        self,
        ref: ConversationRef,
        run_id: str | None,
        reason: AbortReason = "aborted",
    ) -> str | None:
        """Ask the owner of the active run (or of ``run_id`` if active) to abort it; a queued
        ``run_id`` (in the backend's queue) is cancelled and ends in its turn.

        Returns the run id when a running or queued run was asked, None when nothing matched.
        """

    @abstractmethod
    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        """Decide the end of ``run_id`` (its owner is about to log its terminal event): the
        reason of an abort another instance requested before now, else None, and from now on
        such aborts answer None. Atomic with ``request_abort``, so an abort answered with the
        run id always ends the run ``run.cancelled``. Aborts reaching the owner's
        :class:`RunControl` directly are decided by it (``abort`` answers False).
        One instance (memory): every abort reaches the control; nothing to decide."""

    @abstractmethod
    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        """Deliver ``command`` to the owner of ``run_id``; False when that run is not active."""


class QueuedRuns(Protocol):
    """The backend's queue of enqueued runs (multitask ``enqueue`` / ``interrupt``).

    One instance (memory): the RunManager's own per-conversation queue is the whole queue, and
    these do nothing. Several instances (Redis): the queue is kept in the backend with each
    run's request, so runs start in arrival order cluster-wide, the bound counts every
    instance's runs, and the runs of an instance that died are adopted by a live one.
    """

    @abstractmethod
    async def enqueue_run(
        self,
        ref: ConversationRef,
        run: QueuedRun,
        *,
        limit: int | None,
        interrupt: bool = False,
        answer: AcceptedAnswer | None = None,
    ) -> bool:
        """Queue ``run`` last; False when ``limit`` runs wait. With ``interrupt`` every run
        already waiting is cancelled (it still takes the slot in its turn, already aborted).
        ``answer`` is stored with the run's ticket, atomically (see ``accepted_answer``).

        Until it is first, ``claim_run`` refuses it; while runs wait, it refuses a run that
        was not queued. A run cancelled while queued gets its control aborted by its claim.
        """

    @abstractmethod
    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        """Remove a queued run (aborted before it started); True when it was queued."""

    @abstractmethod
    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        """True when this instance's queued ``run_id`` was removed elsewhere (abort, delete)
        or adopted by another instance: it is not this instance's to start any more."""

    @abstractmethod
    async def queued_runs(self, ref: ConversationRef) -> int:
        """How many runs wait in the backend's queue (of every instance; ``untilIdle``)."""

    @abstractmethod
    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        """``run_id`` waits in the backend's queue or holds the slot and is starting."""

    @abstractmethod
    def on_adopted_runs(self, adopter: RunAdopter) -> None:
        """Hand queued runs this instance adopts (their instance died) to ``adopter``, which
        starts them in their turn. Never called on one instance (memory)."""


class IdempotencyStore(Protocol):
    """Replies remembered per ``Idempotency-Key`` scope, for a TTL."""

    @abstractmethod
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None: ...

    @abstractmethod
    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        """Store ``record`` unless the scope already has one; True when stored."""

    @abstractmethod
    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        """Push the scope's expiry ``ttl`` seconds out; False when it holds no record."""

    @abstractmethod
    async def accepted_answer(self, ref: ConversationRef, scope: str) -> IdempotencyRecord | None:
        """The answer ``claim_run`` / ``enqueue_run`` stored with a run they accepted under
        ``scope`` (kept its ``ttl``): found even when the accepting instance died before it
        stored the answer with ``idempotency_put``. One instance (memory): always None, since
        nothing outlives the process that would have stored it."""


class WebhookSupport(Protocol):
    """Where completion webhooks wait when instances share them, and the runs a backend ends
    by itself (their owner was lost) so that those send their webhook too."""

    @abstractmethod
    def webhook_outbox(self) -> WebhookOutbox | None:
        """The outbox every instance delivers from (None: the dispatcher's in-process queue)."""

    @abstractmethod
    def watch_lost_runs(self, listener: LostRunListener) -> None:
        """Await ``listener`` for every run this instance ends because its owner was lost,
        before that end is written (one instance, memory: never happens)."""
