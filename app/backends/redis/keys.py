"""Redis key layout: one hash tag per conversation, derived from a hash of (principal, key).

The raw ``principal:key`` never appears in a key name: two different pairs could spell it alike
(``a:b`` + ``c`` vs ``a`` + ``b:c``), and a key name would leak the principal. The tag is the
first 128 bits of SHA-256 over the length-prefixed pair, so it is unambiguous, and the braces make
every key of one conversation hash to the same Redis Cluster slot (multi-key Lua scripts work on a
cluster, and the cluster shards by conversation).

Layout for a conversation with tag ``T`` under prefix ``P`` (default ``agw``)::

    P:{T}:meta    hash     incarnation ("inc") + ConversationMeta JSON ("meta"): exists = created;
                           "ref": JSON [principal, key] (the reaper's webhook names them); "inc"
                           takes a new epoch ("inc~epoch") when the log lost entries (cursors.py)
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

Every key above, and the channels, is in the conversation's slot (``{T}``): a script touches
one slot, and a cluster (``redis_cluster``, :mod:`.cluster`) places the conversation on one
shard. The limit keys of a conversation (``P:{T}:subs``, ``limits.py``) share it too.

Outside the conversation slots, each key with its slot:

    P:idx:{H}      hash     the conversation keys of the principal whose hash is ``H``: the
                            principal's slot (its listing and ``max_conversations`` limit)
    P:idem:{H}     string   an idempotency record, by hash ``H`` of its scope: a slot per scope
    P:rate:{H}     zset     a principal's runs per minute (``limits.py``): the principal's slot
    P:subs:{H}     zset     a principal's subscriber slots (``limits.py``): the principal's slot
    P:runs         zset     tags of running conversations by lease deadline (the lost-owner
                            sweep's index); on a cluster 16 buckets ``P:{runs.N}``, N from the
                            tag, each its own slot: a run start writes one, a sweep reads all
    P:queues       zset     tags of conversations with queued runs by ticket deadline (the
                            adoption sweep's index); on a cluster ``P:{queues.N}`` likewise
    P:webhooks     stream   the webhook outbox (``webhook_outbox.py``): one slot, written once
                            per ended run when webhooks are configured and read by a consumer
                            group (not per event, so not a hot key)

Instances keep no registry key: a dead instance is noticed by its leases and tickets lapsing.
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


#: Buckets of each sweep index (``P:runs``, ``P:queues``) on a cluster: every run start marks
#: its conversation in one, so one key would put every run on one shard.
CLUSTER_INDEX_BUCKETS = 16


def index_bucket(tag: str, buckets: int) -> int:
    """The bucket of the sweep index a conversation's entry is in."""
    return int(tag[:8], 16) % buckets if buckets > 1 else 0


def sweep_index_key(prefix: str, name: str, bucket: int, buckets: int) -> str:
    """``P:runs`` / ``P:queues`` when there is one bucket (standalone); else bucket ``n``:
    ``P:{runs.n}`` (its own slot)."""
    if buckets <= 1:
        return f"{prefix}:{name}"
    return f"{prefix}:{{{name}.{bucket}}}"


def sweep_index_keys(prefix: str, name: str, buckets: int) -> list[str]:
    """Every bucket of a sweep index: what a sweep reads."""
    return [sweep_index_key(prefix, name, n, buckets) for n in range(max(1, buckets))]


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
