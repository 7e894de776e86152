"""Redis key layout: one hash tag per conversation, derived from a hash of (principal, key).

The raw ``principal:key`` never appears in a key name: two different pairs could spell it alike
(``a:b`` + ``c`` vs ``a`` + ``b:c``), and a key name would leak the principal. The tag is the
first 128 bits of SHA-256 over the length-prefixed pair, so it is unambiguous, and the braces make
every key of one conversation hash to the same Redis Cluster slot (multi-key Lua scripts work on a
cluster, and the cluster shards by conversation).

Layout for a conversation with tag ``T`` under prefix ``P`` (default ``agw``)::

    P:{T}:meta    hash     incarnation ("inc") + ConversationMeta JSON ("meta"): exists = created;
                           "ref": JSON [principal, key] (the reaper's webhook names them)
    P:{T}:log     stream   the event log: one entry per AgentEvent or extension value, fields
                           k (kind), d (JSON, serialized once), t (event type), r (run id)
    P:{T}:snap    hash     snapshot: reduced state, extensions, the stream id they reflect
    P:{T}:run     string   the active run's owner record "token|instance|runId" (no TTL)
    P:{T}:lease   string   the owner's liveness lease, same value, SET PX lease_ttl, renewed
    P:{T}:fence   counter  INCR'd on every ownership change: the fencing token's number
    P:{T}:abort   string   abort flag "runId|reason" the owner polls (pub/sub may drop)
    P:{T}:cmd     list     commands for the owner (RPUSH here, LPOP there)
    P:{T}:inflight set     targets (approval / tool call ids) with a command in flight
    P:{T}:ctl     channel  pub/sub wake-ups for the owner: "abort" | "cmd"
    P:{T}:turn    channel  pub/sub wake-ups for runs waiting for the slot: it was freed
    P:{T}:queue   zset     enqueued runs waiting for the slot, in arrival order (``queue.py``)
    P:{T}:qlive   hash     run id -> liveness deadline (ms, Redis time) of each queued run
    P:{T}:qcancel hash     run id -> reason ("interrupted" | "aborted") of a queued run that was
                           cancelled before it started (it logs its cancellation in its turn)
    P:{T}:qreq    hash     run id -> the queued run's request JSON (input, provider, ...)
    P:{T}:qowner  hash     run id -> the instance that keeps the ticket alive (and will start it)
    P:{T}:idem:S  string   the answer of a run accepted under an Idempotency-Key (S: a hash of
                           its scope), written by the script that accepts the run, PX its TTL

Outside the conversation slots: ``P:idx:{H}`` (hash: the conversation keys of the principal
whose hash is ``H``), ``P:idem:{H}`` (idempotency records, by hash of their scope), ``P:runs``
and ``P:queues`` (conversation tags by lease / ticket deadline: the sweeps' indexes) and
``P:webhooks`` (the webhook outbox stream, ``webhook_outbox.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from app.backends.types import ConversationRef

DEFAULT_PREFIX = "agw"
TAG_HEX_CHARS = 32


def conversation_tag(principal: str | None, key: str) -> str:
    """Hex tag for (principal, key): SHA-256 of the length-prefixed UTF-8 pair, 128 bits."""
    digest = hashlib.sha256()
    for part in (principal or "", key):
        raw = part.encode("utf-8")
        digest.update(len(raw).to_bytes(4, "big"))
        digest.update(raw)
    return digest.hexdigest()[:TAG_HEX_CHARS]


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """Every Redis key of one conversation; all share the ``{tag}`` hash tag."""

    prefix: str
    tag: str

    @classmethod
    def for_conversation(
        cls, principal: str | None, key: str, prefix: str = DEFAULT_PREFIX
    ) -> ConversationKeys:
        return cls(prefix=prefix, tag=conversation_tag(principal, key))

    def _k(self, name: str) -> str:
        return f"{self.prefix}:{{{self.tag}}}:{name}"

    @property
    def meta(self) -> str:
        return self._k("meta")

    @property
    def log(self) -> str:
        return self._k("log")

    @property
    def snap(self) -> str:
        return self._k("snap")

    @property
    def run(self) -> str:
        return self._k("run")

    @property
    def lease(self) -> str:
        return self._k("lease")

    @property
    def fence(self) -> str:
        return self._k("fence")

    @property
    def abort(self) -> str:
        return self._k("abort")

    @property
    def cmd(self) -> str:
        return self._k("cmd")

    @property
    def inflight(self) -> str:
        return self._k("inflight")

    @property
    def ctl(self) -> str:
        return self._k("ctl")

    @property
    def turn(self) -> str:
        return self._k("turn")

    @property
    def queue(self) -> str:
        return self._k("queue")

    @property
    def qlive(self) -> str:
        return self._k("qlive")

    @property
    def qcancel(self) -> str:
        return self._k("qcancel")

    @property
    def qreq(self) -> str:
        return self._k("qreq")

    @property
    def qowner(self) -> str:
        return self._k("qowner")

    def accepted(self, scope: str) -> str:
        """Where the claim / enqueue script stores the answer of a run it accepts under an
        idempotency ``scope`` (with the conversation: the same script, the same slot)."""
        return self._k(f"idem:{_scope_hash(scope)}")

    @property
    def queue_keys(self) -> list[str]:
        """The keys of the queue scripts (``queue.py``), in their KEYS order."""
        return [self.queue, self.qlive, self.qcancel, self.qreq, self.qowner]

    def all_keys(self) -> tuple[str, ...]:
        """Every data key (not the channel): what a DELETE removes."""
        return (
            self.meta,
            self.log,
            self.snap,
            self.run,
            self.lease,
            self.fence,
            self.abort,
            self.cmd,
            self.inflight,
            self.queue,
            self.qlive,
            self.qcancel,
            self.qreq,
            self.qowner,
        )


def principal_index_key(principal: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The hash listing a principal's conversation keys (its own slot)."""
    return f"{prefix}:idx:{{{conversation_tag(principal, '')}}}"


def _scope_hash(scope: str) -> str:
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()[:32]


def idempotency_key(scope: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}:idem:{{{_scope_hash(scope)}}}"


def ref_value(ref: ConversationRef) -> bytes:
    """The meta hash's ``ref`` field: who the conversation is (the tag is a one-way hash)."""
    return orjson.dumps([ref.principal, ref.key])


def ref_of(value: bytes | str | None) -> ConversationRef | None:
    """The conversation a ``ref`` field names (None: absent or not ours)."""
    if not value:
        return None
    try:
        principal, key = orjson.loads(value)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if not isinstance(principal, str) or not isinstance(key, str):
        return None
    return ConversationRef(principal, key)
