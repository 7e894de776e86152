"""The backend interface: where a conversation's log, snapshot, run ownership and control live.

One interface, two implementations (ARCHITECTURE decision 6): memory (embedded default) and
Redis. :class:`Backend` is the composition of the roles of :mod:`app.backends.roles`; the
values it stores and returns are in :mod:`app.backends.types`. The contract, pinned by
``tests/app/support/backend_contract.py``:

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

from typing import Protocol

from app.backends.roles import (
    ConversationStore,
    EventAppender,
    EventReader,
    IdempotencyStore,
    Lifecycle,
    QueuedRuns,
    RunSignals,
    RunSlots,
    Snapshots,
    WebhookSupport,
)
from app.backends.types import (
    EMPTY_CURSOR,
    AppendDone,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogEntry,
    LogItem,
    ReadResult,
    ReadSink,
    RunControl,
    Snapshot,
)

__all__ = [
    "EMPTY_CURSOR",
    "AppendDone",
    "Backend",
    "ConversationMeta",
    "ConversationRef",
    "IdempotencyRecord",
    "LogEntry",
    "LogItem",
    "ReadResult",
    "ReadSink",
    "RunControl",
    "Snapshot",
]


class Backend(
    Lifecycle,
    ConversationStore,
    EventAppender,
    EventReader,
    Snapshots,
    RunSlots,
    RunSignals,
    QueuedRuns,
    IdempotencyStore,
    WebhookSupport,
    Protocol,
):
    """Storage and control of conversations: every role. Coroutines except ``wake_readers``,
    ``run_dropped`` and ``on_adopted_runs``."""
