"""A soak: two gateway instances on one Redis (or a Redis Cluster), C conversations, kill -9s
and Redis restarts (or master kills).

Two real ``agent-gateway serve`` processes share one ``redis-server`` (``--appendonly yes
--appendfsync always``: a ``kill -9`` of Redis loses nothing it acknowledged) and one key
prefix, with a short lease TTL so the runs of a killed instance are reaped fast; the upstream
is the bench's mock (OpenAI chat). Meanwhile:

- C conversations each loop: follow ``GET …/events`` (reconnecting with ``Last-Event-ID`` to a
  random live instance after any drop, and now and then on purpose), ``POST …/runs`` to a
  random instance (``multitask`` mostly ``reject``, some ``enqueue`` behind it), mixed answer
  sizes (mostly 5–60 deltas, some 200–500, 1–10 ms apart), sometimes ``POST …/abort`` to the
  *other* instance. A POST that met a connection error or a 5xx is retried with the same
  ``Idempotency-Key`` (so a retry is never a second run).
- every ``--kill-every`` seconds a random instance is ``kill -9``ed and restarted on its port;
  ``--redis-restarts`` times Redis is stopped (SIGTERM, then ``kill -9``), kept down 2 s and
  restarted on the same port and directory.

With ``--redis-cluster`` the Redis is a Redis Cluster of the soak's own (three masters, three
replicas, ``cluster-node-timeout`` 2 s; :mod:`bench.harness.redis_failover`), the gateways run
with ``[gateway] redis_cluster = true`` (every node a seed) and ``redis_wait_replicas =
--wait-replicas``, and ``--master-kills`` times a master is killed (SIGKILL) instead of a Redis
restart: its replica is promoted, the killed node restarted and resynced as a replica before
the soak goes on. At the end each conversation's log is read back from the cluster and set
against what its client received: the events lost (received, or followed by a later sequence of
their run, and gone from the log) and repeated, with the master kill before each. Replication is
asynchronous: with ``--wait-replicas 0`` a failover may lose the newest events of its shard, and
the soak reports them (and the resume snapshots and client-side gaps they cause) without failing;
with ``--wait-replicas 1`` any loss or repeat fails it. Every accepted run ending with exactly
one terminal is checked either way.

At the end, per conversation, from what its client received and ``GET …/state``: every 202 ended
with exactly one terminal event (``gateway_instance_lost`` counted apart) and is terminal in the
state; per-run sequences are contiguous and never repeated; completed runs carried every delta;
no 5xx outside a disruption window. It prints tables, a ``SUMMARY`` line, and exits 1 listing
each offending conversation/run with its evidence.

    nice .venv/bin/python bench/soak.py [--duration 600] [--conversations 40] [--kill-every 60]
        [--redis-restarts 2] [--seed 1]
    nice .venv/bin/python bench/soak.py --redis-cluster [--master-kills 3] [--wait-replicas 1] …
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import orjson
import uvloop
from httpx_sse import aconnect_sse
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError, ResponseError

from app.backends.redis.keys import ConversationKeys
from bench.harness.cluster import Instance, RestartableRedis, Window, Windows
from bench.harness.mock_upstream import prompt
from bench.harness.procs import ROOT, gateway_config, start_server
from bench.harness.redis_failover import FailoverCluster
from bench.harness.soak_checks import (
    Accepted,
    Conversation,
    Finding,
    LogAudit,
    Logged,
    audit_log,
    check,
    terminal_kind,
)
from bench.harness.stats import median, table

#: The principal of the soak's requests (no auth configured): its conversations' keys.
ANONYMOUS = "anonymous"
#: ``event_log_max_len`` of a cluster soak: no log is trimmed, the end reads each back whole.
AUDIT_LOG_MAX_LEN = 10_000_000
#: What a client sees of events a failover lost: reported on a cluster without
#: ``redis_wait_replicas`` rather than failed.
LOSS_CATEGORIES = frozenset(
    {
        "sequence gap",
        "sequence repeated",
        "completed run short",
        "resume answered with a snapshot",
    }
)
#: Redis stays down this long at each restart (clients retry meanwhile).
REDIS_DOWN_SECONDS = 2.0
#: A POST is retried (same Idempotency-Key) for this long before it counts as unanswered.
POST_RETRY_SECONDS = 60.0


@dataclass
class Options:
    duration: float = 600.0
    conversations: int = 40
    kill_every: float = 60.0
    redis_restarts: int = 2
    seed: int = 1
    lease_ttl: float = 3.0
    #: Share of rounds that enqueue a second run behind the first.
    enqueue_share: float = 0.25
    abort_share: float = 0.2
    #: A conversation waits this long for its runs' terminals before it gives up on them
    #: (reported) and goes on with a new conversation key.
    run_timeout: float = 60.0
    quiet: bool = False
    #: A Redis Cluster of the soak's own, with master kills instead of Redis restarts.
    redis_cluster: bool = False
    master_kills: int = 3
    #: ``[gateway] redis_wait_replicas`` (cluster only).
    wait_replicas: int = 0
    #: Keep the gateway and Redis logs also when the soak passes.
    keep_logs: bool = False


@dataclass
class Incident:
    """A 5xx or a transport error met by a client."""

    at: float
    instance: str
    request: str
    what: str
    window: Window | None


@dataclass
class Tally:
    posts: int = 0
    retries: int = 0
    unanswered: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    aborts: Counter[str] = field(default_factory=Counter)
    errors_5xx: list[Incident] = field(default_factory=list)
    transport: list[Incident] = field(default_factory=list)
    gave_up: int = 0


@dataclass
class Result:
    passed: bool
    findings: list[Finding]
    summary: str
    report: str


def _said(answer: httpx.Response) -> str:
    """ "202 run_x started" / "503 backend_unavailable": a request's answer, short."""
    try:
        data = answer.json()
    except ValueError:
        return str(answer.status_code)
    if not isinstance(data, dict):
        return str(answer.status_code)
    if "error" in data:
        return f"{answer.status_code} {data['error'].get('code')}"
    detail = data.get("status", data.get("aborted", ""))
    return f"{answer.status_code} {data.get('runId', '')} {detail}".strip()


class Soak:
    def __init__(self, opts: Options, directory: Path, upstream: str) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.windows = Windows(grace=2 * opts.lease_ttl + 1.0)
        self.redis = RestartableRedis(directory)
        self.nodes = FailoverCluster(directory) if opts.redis_cluster else None
        #: Per conversation key: what its final log lost or holds twice (a cluster soak).
        self.audits: dict[str, LogAudit] = {}
        self.audit_errors: list[str] = []
        #: The client-side findings a failover's loss explains (a cluster soak without
        #: ``redis_wait_replicas``): reported, not failed.
        self.told: list[Finding] = []
        self.directory = directory
        self.upstream = upstream
        self.instances: list[Instance] = []
        self.conversations: list[Conversation] = []
        self.followers: list[asyncio.Task[None]] = []
        self.tally = Tally()
        self.t0 = 0.0
        self.deadline = 0.0
        self.ended_at = 0.0

    # --- processes ----------------------------------------------------------------------

    async def start(self) -> None:
        gateway: dict[str, Any] = {
            "lease_ttl_seconds": self.opts.lease_ttl,
            "heartbeat_seconds": 2,
            "shutdown_grace_seconds": 1,
        }
        if self.nodes is not None:
            await self.nodes.start()
            redis_url = self.nodes.url
            gateway |= {
                "redis_cluster": True,
                "redis_cluster_nodes": self.nodes.addresses,
                "redis_wait_replicas": self.opts.wait_replicas,
                # Every event stays in the log: the end reads it back whole.
                "event_log_max_len": AUDIT_LOG_MAX_LEN,
            }
        else:
            await self.redis.start()
            redis_url = self.redis.url
        config = gateway_config(
            self.upstream, backend="redis", redis_url=redis_url, gateway=gateway
        )
        self.instances = [Instance(name, config, self.directory) for name in ("A", "B")]
        await asyncio.gather(*(instance.start() for instance in self.instances))

    async def stop(self) -> None:
        await asyncio.gather(*(instance.stop() for instance in self.instances))
        if self.nodes is not None:
            await self.nodes.stop()
        else:
            await self.redis.stop()

    @property
    def redis_action(self) -> str:
        return "master" if self.nodes is not None else "redis"

    def plan(self) -> list[tuple[float, str]]:
        """(seconds after the start, "kill" | "redis" | "master") — Redis restarts (master kills
        on a cluster) halfway between kills."""
        duration, every = self.opts.duration, self.opts.kill_every
        steps: list[tuple[float, str]] = []
        k = 1
        while k * every < duration - 5:
            steps.append((k * every, "kill"))
            k += 1
        disruptions = self.opts.master_kills if self.nodes is not None else self.opts.redis_restarts
        for j in range(disruptions):
            target = (j + 1) * duration / (disruptions + 1)
            half = round(target / every - 0.5) + 0.5
            steps.append((max(0.5, half) * every, self.redis_action))
        return sorted(s for s in steps if s[0] < duration - 5)

    async def chaos(self) -> None:
        redis_count = 0
        for offset, action in self.plan():
            await asyncio.sleep(max(0.0, self.t0 + offset - time.monotonic()))
            if time.monotonic() > self.deadline - 5:
                # Late (a restart before it took long): the load is over, skip the rest.
                self.log(f"{action} planned at {offset:g}s skipped: too close to the end")
                continue
            if action == "kill":
                instance = self.rng.choice(self.instances)
                window = self.windows.open(f"kill -9 {instance.name}")
                await instance.kill()
                await instance.start()
            elif action == "master":
                assert self.nodes is not None
                victim = await self.nodes.pick_master(self.rng)
                window = self.windows.open(f"master :{victim.port} SIGKILL")
                done = await self.nodes.fail_over(victim)
                self.log(
                    f"master :{done.port} ({done.slots}) killed: :{done.promoted} promoted after "
                    f"{done.promoted_after:.1f}s, :{done.port} back as its replica after "
                    f"{done.rejoined_after:.1f}s"
                )
            else:
                sig = signal.SIGTERM if redis_count % 2 == 0 else signal.SIGKILL
                redis_count += 1
                window = self.windows.open(f"redis {signal.Signals(sig).name}")
                await self.redis.stop(sig)
                await asyncio.sleep(REDIS_DOWN_SECONDS)
                await self.redis.start()
            window.end = time.monotonic()
            self.log(f"{window.label}: {window.end - window.start:.1f}s down")

    def log(self, text: str) -> None:
        if not self.opts.quiet:
            print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", flush=True)

    def pick(self, rng: random.Random, other_than: str | None = None) -> Instance:
        live = [i for i in self.instances if i.up and i.name != other_than]
        if not live:
            live = [i for i in self.instances if i.name != other_than] or self.instances
        return rng.choice(live)

    def by_name(self, name: str) -> Instance:
        return next(i for i in self.instances if i.name == name)

    # --- requests -----------------------------------------------------------------------

    def incident(self, into: list[Incident], inst: Instance, request: str, what: str) -> None:
        now = time.monotonic()
        into.append(Incident(now, inst.name, request, what, self.windows.during(now)))

    async def post(
        self,
        client: httpx.AsyncClient,
        rng: random.Random,
        path: str,
        body: dict[str, Any],
        first: Instance,
        headers: dict[str, str] | None = None,
        conv: Conversation | None = None,
    ) -> tuple[httpx.Response, Instance, int] | None:
        """POST until a non-5xx answer (another instance after a failure); None if none came."""
        give_up = time.monotonic() + POST_RETRY_SECONDS
        inst, attempts = first, 0
        while time.monotonic() < give_up:
            attempts += 1
            self.tally.posts += 1
            route = path.rsplit("/", 1)[1]
            try:
                answer = await client.post(inst.url + path, json=body, headers=headers)
            except httpx.TransportError as exc:
                self.incident(self.tally.transport, inst, f"POST {path}", type(exc).__name__)
                if conv is not None:
                    conv.requests.append((time.monotonic(), f"{route}→{inst.name} {exc!r}"))
                    if route == "runs":
                        conv.unanswered_posts.append(time.monotonic())
            else:
                if conv is not None:
                    conv.requests.append((time.monotonic(), f"{route}→{inst.name} {_said(answer)}"))
                if answer.status_code < 500:
                    return answer, inst, attempts
                what = f"{answer.status_code} {answer.text[:160]}"
                self.incident(self.tally.errors_5xx, inst, f"POST {path}", what)
            self.tally.retries += 1
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            inst = self.pick(rng)
        self.tally.unanswered += 1
        return None

    async def start_run(
        self,
        client: httpx.AsyncClient,
        rng: random.Random,
        conv: Conversation,
        multitask: str,
    ) -> Accepted | None:
        if rng.random() < 0.7:
            n = rng.randint(5, 60)
        else:
            n = rng.randint(200, 500)
        delay = rng.randint(1, 10)
        body = {"input": {"prompt": prompt(n, delay)}, "multitask": multitask}
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        path = f"/v1/conversations/{conv.key}/runs"
        answered = await self.post(client, rng, path, body, self.pick(rng), headers, conv)
        if answered is None:
            return None
        answer, inst, attempts = answered
        if answer.status_code != 202:
            code = answer.json().get("error", {}).get("code", "?")
            self.tally.refused[f"{answer.status_code} {code}"] += 1
            return None
        data = answer.json()
        accepted = Accepted(
            str(data["runId"]),
            str(data["status"]),
            inst.name,
            time.monotonic(),
            n,
            multitask,
            attempts,
        )
        conv.accepted[accepted.run_id] = accepted
        return accepted

    async def abort(
        self, client: httpx.AsyncClient, rng: random.Random, conv: Conversation, run: Accepted
    ) -> None:
        other = self.pick(rng, other_than=run.instance)
        path = f"/v1/conversations/{conv.key}/abort"
        answered = await self.post(client, rng, path, {"runId": run.run_id}, other, None, conv)
        if answered is None:
            self.tally.aborts["unanswered"] += 1
            return
        answer = answered[0]
        aborted = answer.status_code == 202 and answer.json().get("aborted") is True
        self.tally.aborts["202 aborted" if aborted else str(answer.status_code)] += 1

    # --- a conversation -----------------------------------------------------------------

    async def follow(
        self, client: httpx.AsyncClient, rng: random.Random, conv: Conversation, hop: asyncio.Event
    ) -> None:
        """The conversation's SSE stream, for good: after any drop (or a ``hop``), reconnect to a
        random live instance with ``Last-Event-ID``."""
        while True:
            hop.clear()
            reader = asyncio.ensure_future(self._stream(client, conv, self.pick(rng)))
            hopper = asyncio.ensure_future(hop.wait())
            try:
                await asyncio.wait({reader, hopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hopper.cancel()
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            conv.reconnects += 1
            await asyncio.sleep(rng.uniform(0.05, 0.3))

    async def _stream(self, client: httpx.AsyncClient, conv: Conversation, inst: Instance) -> None:
        since = conv.last_id
        headers = {} if since is None else {"Last-Event-ID": since}
        url = f"{inst.url}/v1/conversations/{conv.key}/events"
        try:
            async with aconnect_sse(client, "GET", url, headers=headers) as source:
                status = source.response.status_code
                if status != 200:
                    await source.response.aread()
                    what = f"{status} {source.response.text[:160]}"
                    if status >= 500:
                        self.incident(self.tally.errors_5xx, inst, "GET events", what)
                    else:
                        self.tally.refused[f"GET events {status}"] += 1
                    return
                async for sse in source.aiter_sse():
                    if sse.event == "snapshot":
                        if since is not None:
                            conv.resume_snapshots.append(
                                f"GET events on {inst.name} with Last-Event-ID {since} at "
                                f"t={time.monotonic() - self.t0:.1f}s answered with a snapshot"
                            )
                        conv.last_id = sse.id
                        conv.subscribed.set()
                    elif sse.event == "message" and sse.data:
                        conv.record(orjson.loads(sse.data), time.monotonic())
                        conv.last_id = sse.id
        except httpx.TransportError as exc:
            self.incident(self.tally.transport, inst, "GET events", type(exc).__name__)

    async def drive(self, client: httpx.AsyncClient, slot: int, rng: random.Random) -> None:
        """One client slot: a conversation until the deadline (a new one after a run that never
        ended, so the rest of the soak still exercises this slot)."""
        generation = 0
        while time.monotonic() < self.deadline:
            conv = Conversation(f"soak-{self.opts.seed}-{slot}-{generation}-{uuid.uuid4().hex[:6]}")
            generation += 1
            self.conversations.append(conv)
            hop = asyncio.Event()
            self.followers.append(asyncio.create_task(self.follow(client, rng, conv, hop)))
            try:
                await asyncio.wait_for(conv.subscribed.wait(), 60)
            except TimeoutError:
                self.log(f"{conv.key}: no snapshot within 60 s, next conversation")
                continue
            await self.rounds(client, rng, conv, hop)

    async def rounds(
        self, client: httpx.AsyncClient, rng: random.Random, conv: Conversation, hop: asyncio.Event
    ) -> None:
        """Runs until the deadline, or until one never ends."""
        while time.monotonic() < self.deadline:
            first = await self.start_run(client, rng, conv, "reject")
            if first is None:
                await asyncio.sleep(rng.uniform(0.5, 1.5))
                continue
            runs = [first]
            if rng.random() < self.opts.enqueue_share:
                second = await self.start_run(client, rng, conv, "enqueue")
                if second is not None:
                    runs.append(second)
            if rng.random() < self.opts.abort_share:
                await asyncio.sleep(rng.uniform(0.0, 1.0))
                await self.abort(client, rng, conv, first)
            for run in runs:
                left = run.at + self.opts.run_timeout - time.monotonic()
                try:
                    await asyncio.wait_for(conv.ended(run.run_id).wait(), max(left, 0.1))
                except TimeoutError:
                    self.tally.gave_up += 1
                    self.log(f"{conv.key}: run {run.run_id} ({run.status}) did not end in time")
                    return
            if rng.random() < 0.15:
                hop.set()  # resume on purpose, maybe on the other instance
            await asyncio.sleep(rng.uniform(0.1, 1.0))

    # --- the end ------------------------------------------------------------------------

    async def settle(self, within: float) -> None:
        """Give terminals still on their way a moment."""
        pending = [
            conv.ended(run_id).wait()
            for conv in self.conversations
            for run_id in conv.accepted
            if not conv.ended(run_id).is_set()
        ]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending), within)

    async def read_states(self, client: httpx.AsyncClient) -> None:
        rng = random.Random(self.opts.seed)

        async def one(conv: Conversation) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                inst = self.pick(rng)
                try:
                    answer = await client.get(f"{inst.url}/v1/conversations/{conv.key}/state")
                except httpx.TransportError as exc:
                    conv.state_error = f"{inst.name}: {type(exc).__name__}"
                else:
                    if answer.status_code == 200:
                        conv.state = answer.json()
                        return
                    conv.state_error = f"{inst.name}: {answer.status_code} {answer.text[:160]}"
                    if answer.status_code < 500:
                        return
                await asyncio.sleep(0.5)

        await asyncio.gather(*(one(conv) for conv in self.conversations if conv.accepted))

    async def run(self) -> None:
        await self.start()
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.opts.duration
        self.log(
            f"A {self.instances[0].url}, B {self.instances[1].url}, "
            f"redis {self.nodes.url if self.nodes is not None else self.redis.url}, "
            f"logs in {self.directory}"
        )
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
        timeout = httpx.Timeout(10.0, connect=3.0)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            chaos = asyncio.create_task(self.chaos())
            drivers = [
                asyncio.create_task(self.drive(client, slot, random.Random(self.rng.random())))
                for slot in range(self.opts.conversations)
            ]
            await asyncio.gather(*drivers)
            await chaos
            await self.settle(10)
            self.ended_at = time.monotonic()
            await self.read_states(client)
            for follower in self.followers:
                follower.cancel()
            await asyncio.gather(*self.followers, return_exceptions=True)
        if self.nodes is not None:
            await self.read_logs(self.nodes)

    async def read_logs(self, nodes: FailoverCluster) -> None:
        """Each conversation's whole log, from the cluster, against what its client received."""
        client = RedisCluster(
            startup_nodes=[ClusterNode(*a.split(":")) for a in nodes.addresses],
            socket_timeout=30,
        )
        try:
            for conv in self.conversations:
                if not conv.accepted and not conv.received:
                    continue
                log_key = ConversationKeys.for_conversation(ANONYMOUS, conv.key).log
                try:
                    logged = await read_log(client, log_key)
                except (RedisError, ValueError) as exc:
                    self.audit_errors.append(f"{conv.key}: {exc!r}")
                    continue
                if logged is None:
                    self.audit_errors.append(f"{conv.key}: its log was trimmed")
                    continue
                self.audits[conv.key] = audit_log(conv, logged)
        finally:
            await client.aclose()

    # --- the report ---------------------------------------------------------------------

    @property
    def losses_fail(self) -> bool:
        """Whether an event lost or repeated fails the soak: not on a cluster without
        ``redis_wait_replicas`` (asynchronous replication may lose a failover's last writes:
        reported, see :meth:`loss_report`)."""
        return self.nodes is None or self.opts.wait_replicas > 0

    def findings(self) -> list[Finding]:
        found = [f for conv in self.conversations for f in check(conv, self.t0, self.killed)]
        if not self.losses_fail:
            self.told = [f for f in found if f.category in LOSS_CATEGORIES]
            found = [f for f in found if f.category not in LOSS_CATEGORIES]
        else:
            for key, audit in self.audits.items():
                for run_id, sequence, at in audit.lost:
                    when = "never received" if at is None else f"received at t={at - self.t0:.1f}s"
                    what = f"#{sequence} {when}"
                    found.append(Finding("event lost (gone from the log)", key, run_id, what))
                for run_id, sequence, at in audit.repeated:
                    when = "in the log" if at is None else f"received at t={at - self.t0:.1f}s"
                    found.append(Finding("event repeated", key, run_id, f"#{sequence} {when}"))
        found += [Finding("log not audited", "-", "-", error) for error in self.audit_errors]
        errors = self.log_errors()
        for finding in found:
            for line in errors.get(finding.run_id, [])[:2]:
                finding.evidence += f"; gateway log: {line}"
        for incident in self.tally.errors_5xx:
            if incident.window is None:
                found.append(
                    Finding(
                        "5xx outside a disruption",
                        "-",
                        "-",
                        f"t={incident.at - self.t0:.1f}s {incident.instance} "
                        f"{incident.request}: {incident.what}",
                    )
                )
        return found

    def ended_badly(self) -> str:
        """Every run that failed (lost ones too), with when and the disruption before it."""
        rows: list[tuple[float, list[object]]] = []
        for conv in self.conversations:
            for run_id, seen in conv.runs.items():
                for terminal in seen.terminals:
                    kind = terminal_kind(terminal)
                    if not kind.startswith(("failed", "lost")) or seen.terminal_at is None:
                        continue
                    window = self.windows.last_before(seen.terminal_at)
                    after = "-"
                    if window is not None:
                        after = f"{window.label} +{seen.terminal_at - window.start:.1f}s"
                    accepted = conv.accepted.get(run_id)
                    at = seen.terminal_at - self.t0
                    by = "-" if accepted is None else accepted.instance
                    rows.append((at, [conv.key, run_id, kind, by, at, after]))
        return table(
            "Failed runs (terminal received)",
            ["conversation", "run", "kind", "202 from", "at s", "after"],
            [row for _, row in sorted(rows, key=lambda item: item[0])],
        )

    def loss_report(self) -> tuple[str, int, int]:
        """The events the cluster's final logs lost or hold twice, by the disruption before
        each (for an event no client received: before its run's first event), and the
        client-side findings they explain; with the totals (lost, repeated)."""
        by: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        runs: dict[str, set[str]] = defaultdict(set)
        lost = repeated = 0
        for conv in self.conversations:
            audit = self.audits.get(conv.key)
            if audit is None:
                continue
            for column, items in ((0, audit.lost), (1, audit.repeated)):
                for run_id, _, at in items:
                    if at is None:
                        seen = conv.runs.get(run_id)
                        at = seen.first_at if seen is not None else self.ended_at
                    window = self.windows.last_before(at)
                    label = "before any disruption" if window is None else window.label
                    by[label][column] += 1
                    runs[label].add(run_id)
                    lost += column == 0
                    repeated += column == 1
        rows = [
            [label, counts[0], counts[1], len(runs[label])]
            for label, counts in sorted(
                by.items(),
                key=lambda item: next(
                    (w.start for w in self.windows.items if w.label == item[0]), 0.0
                ),
            )
        ]
        out = [
            table(
                f"Events lost or repeated (the final logs of {len(self.audits)} conversations "
                "against what their clients received), by the disruption before them",
                ["after", "lost", "repeated", "runs"],
                rows or [["-", 0, 0, 0]],
            )
        ]
        if self.told:
            told: Counter[str] = Counter(f.category for f in self.told)
            lines = ["What clients saw of them (reported, not failed: no redis_wait_replicas)"]
            lines += [f"  {category}: {count}" for category, count in sorted(told.items())]
            lines += [f"    {f.conversation} {f.run_id}: {f.evidence}" for f in self.told[:8]]
            out.append("\n".join(lines))
        return "\n\n".join(out), lost, repeated

    def killed(self, instance: str, since: float) -> bool:
        label = f"kill -9 {instance}"
        return any(w.label == label and w.start >= since - 0.5 for w in self.windows.items)

    def log_errors(self) -> dict[str, list[str]]:
        """run id -> its error lines in the gateway logs (message and where it was raised)."""
        found: dict[str, list[str]] = defaultdict(list)
        for inst in self.instances:
            if not inst.log.exists():
                continue
            for line in inst.log.read_text(errors="replace").splitlines():
                try:
                    entry = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(entry, dict) or entry.get("level") != "error":
                    continue
                exc = str(entry.get("exc", ""))
                section = exc.rsplit("exception:", 1)[-1]  # the last of a chained traceback
                frames = re.findall(
                    r'File "' + re.escape(str(ROOT)) + r'/(app/[^"]+)", line (\d+)', section
                )
                where = " -> ".join(f"{path}:{line}" for path, line in frames[:3])
                last = (exc.strip().splitlines() or [""])[-1][:80]
                stamp = str(entry.get("ts", ""))[11:23]
                run_id = entry.get("run_id") or next(
                    iter(re.findall(r"run_[A-Za-z0-9]+", str(entry.get("msg")))), ""
                )
                found[str(run_id)].append(
                    f"{inst.name} {stamp} {entry.get('msg')} [{last}] at {where}"
                )
        return found

    def log_counts(self) -> dict[str, int]:
        """What the gateway logs say happened, counted over both instances."""
        marks = {
            "error lines": '"level":"error"',
            "leases lost by a live owner": "lease expired before it could be renewed",
            "runs reaped (lost owner)": "lost its owner",
            "  of which reaped with 0 events": "(0 events,",
        }
        counts = dict.fromkeys(marks, 0)
        for inst in self.instances:
            text = inst.log.read_text(errors="replace") if inst.log.exists() else ""
            for name, mark in marks.items():
                counts[name] += text.count(mark)
        return counts

    def result(self) -> Result:
        findings = self.findings()
        rel = self.t0
        accepted = [a for conv in self.conversations for a in conv.accepted.values()]
        kinds: Counter[str] = Counter()
        reap: list[float] = []
        for conv in self.conversations:
            for run_id, seen in conv.runs.items():
                for terminal in seen.terminals:
                    kinds[terminal_kind(terminal)] += 1
                if seen.terminal_at is not None and any(
                    terminal_kind(t) == "lost" for t in seen.terminals
                ):
                    window = self.windows.last_before(seen.terminal_at)
                    if window is not None and run_id in conv.accepted:
                        reap.append(seen.terminal_at - window.start)
        out: list[str] = []
        out.append(
            table(
                "Disruptions",
                ["what", "at s", "down s"],
                [
                    [w.label, w.start - rel, (w.end or self.ended_at) - w.start]
                    for w in self.windows.items
                ],
            )
        )
        in_5xx: Counter[str] = Counter(
            i.window.label if i.window else "outside" for i in self.tally.errors_5xx
        )
        in_tx: Counter[str] = Counter(
            i.window.label if i.window else "outside" for i in self.tally.transport
        )
        events = sum(conv.events for conv in self.conversations)
        rows: list[list[object]] = [
            ["conversations (keys)", len(self.conversations)],
            ["runs accepted (202)", len(accepted)],
            ["  of which queued", sum(1 for a in accepted if a.status == "queued")],
            ["  of which after a retry", sum(1 for a in accepted if a.attempts > 1)],
            ["events received", events],
            ["stream reconnects", sum(conv.reconnects for conv in self.conversations)],
            ["POST requests / retries", f"{self.tally.posts} / {self.tally.retries}"],
            ["POSTs never answered", self.tally.unanswered],
            ["runs without a 202 (their POST unanswered: instance died), one terminal",
             sum(len(conv.unannounced) for conv in self.conversations)],
            ["refused", dict(self.tally.refused) or "-"],
            ["aborts sent", dict(self.tally.aborts) or "-"],
            [f"runs given up on (no terminal in {self.opts.run_timeout:g} s)", self.tally.gave_up],
            ["5xx by window", dict(in_5xx) or "-"],
            ["transport errors by window", dict(in_tx) or "-"],
            ["lost runs: kill -> terminal s (median/max)",
             f"{median(reap):.1f} / {max(reap, default=float('nan')):.1f}" if reap else "-"],
        ]  # fmt: skip
        rows += [[f"gateway logs: {name}", count] for name, count in self.log_counts().items()]
        out.append(table("Totals", ["", "value"], rows))
        out.append(table("Terminal events received", ["kind", "count"], sorted(kinds.items())))
        out.append(self.ended_badly())
        lost_events = repeated_events = 0
        if self.nodes is not None:
            report, lost_events, repeated_events = self.loss_report()
            out.append(report)
            failovers = [
                [f":{f.port}", f.slots, f":{f.promoted}", f.promoted_after, f.rejoined_after]
                for f in self.nodes.failovers
            ]
            out.append(
                table(
                    "Master kills",
                    ["master", "slots", "promoted", "promoted after s", "rejoined after s"],
                    failovers,
                )
            )
        by_category: dict[str, list[Finding]] = defaultdict(list)
        for finding in findings:
            by_category[finding.category].append(finding)
        if by_category:
            lines = ["Findings (checks that failed)"]
            for category, items in sorted(by_category.items()):
                lines.append(f"  {category}: {len(items)}")
                lines += [f"    {i.conversation} {i.run_id}: {i.evidence}" for i in items[:12]]
                if len(items) > 12:
                    lines.append(f"    … {len(items) - 12} more")
            out.append("\n".join(lines))
        lost = kinds.pop("lost", 0)
        failed = sum(v for k, v in kinds.items() if k.startswith("failed"))
        outside = in_5xx.get("outside", 0)
        passed = not findings
        categories = ", ".join(f"{k}: {len(v)}" for k, v in sorted(by_category.items()))

        def count(prefix: str) -> int:
            return sum(1 for w in self.windows.items if w.label.startswith(prefix))

        if self.nodes is not None:
            disruptions = (
                f"redis_cluster wait_replicas={self.opts.wait_replicas} "
                f"master_kills={count('master')} "
                f"lost_events={lost_events} repeated_events={repeated_events} "
                f"told={len(self.told)} "
            )
        else:
            disruptions = f"redis_restarts={count('redis')} "
        summary = (
            f"SUMMARY soak {self.opts.duration:g}s C={self.opts.conversations} "
            f"kills={count('kill')} {disruptions}"
            f"runs={len(accepted)} events={events} completed={kinds.get('completed', 0)} "
            f"cancelled={kinds.get('cancelled', 0)} failed={failed} instance_lost={lost} "
            f"5xx_in_windows={sum(in_5xx.values()) - outside} 5xx_outside={outside} "
            f"findings={len(findings)} ({categories or 'none'}) "
            f"{'PASS' if passed else 'FAIL'}"
        )
        return Result(passed, findings, summary, "\n\n".join(out))


async def read_log(client: RedisCluster, key: str) -> list[Logged] | None:
    """(event id, run id, sequence) of every event in the log ``key``; None when it was
    trimmed (the audit needs it whole)."""
    logged: list[Logged] = []
    after = "-"
    added = 0
    with contextlib.suppress(ResponseError):  # no such key: nothing logged
        info = await client.xinfo_stream(key)
        added = int(info.get("entries-added", info.get("length", 0)))
    read = 0
    while True:
        entries: Any = await client.xrange(key, min=after, max="+", count=5000)
        read += len(entries)
        for entry_id, fields in entries:
            after = "(" + entry_id.decode()
            if fields.get(b"k", b"e") != b"e":
                continue
            event = orjson.loads(fields[b"d"])
            logged.append(
                (str(event.get("eventId")), str(event.get("runId")), int(event.get("sequence", -1)))
            )
        if len(entries) < 5000:
            break
    return None if added > read else logged


def run_soak(opts: Options) -> Result:
    """Start everything, soak, stop everything; the logs stay in a temp dir when it fails."""
    directory = Path(tempfile.mkdtemp(prefix="soak-"))
    upstream = start_server("upstream")
    try:
        soak = Soak(opts, directory, upstream.url)

        async def go() -> Result:
            try:
                await soak.run()
            finally:
                await soak.stop()
            return soak.result()

        result = uvloop.run(go())
    finally:
        upstream.stop()
    shutil.rmtree(directory / "appendonlydir", ignore_errors=True)
    shutil.rmtree(directory / "redis-cluster", ignore_errors=True)
    if result.passed and not opts.keep_logs:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        result.report += f"\n\nGateway and Redis logs: {directory}"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds")
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--redis-restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lease-ttl", type=float, default=3.0, help="seconds")
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="a Redis Cluster of the soak's own (3 masters, 3 replicas), master kills instead "
        "of Redis restarts",
    )
    parser.add_argument("--master-kills", type=int, default=3, help="with --redis-cluster")
    parser.add_argument(
        "--wait-replicas",
        type=int,
        default=0,
        help="[gateway] redis_wait_replicas, with --redis-cluster (1: any event lost fails)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="also when it passes")
    args = parser.parse_args(argv)
    if args.wait_replicas and not args.redis_cluster:
        parser.error("--wait-replicas needs --redis-cluster")
    opts = Options(
        duration=args.duration,
        conversations=args.conversations,
        kill_every=args.kill_every,
        redis_restarts=args.redis_restarts,
        seed=args.seed,
        lease_ttl=args.lease_ttl,
        redis_cluster=args.redis_cluster,
        master_kills=args.master_kills,
        wait_replicas=args.wait_replicas,
        keep_logs=args.keep_logs,
    )
    result = run_soak(opts)
    print(result.report)
    print(result.summary)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
