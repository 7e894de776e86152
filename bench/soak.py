"""A soak: two gateway instances on one Redis, C conversations, kill -9s and Redis restarts.

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

At the end, per conversation, from what its client received and ``GET …/state``: every 202 ended
with exactly one terminal event (``gateway_instance_lost`` counted apart) and is terminal in the
state; per-run sequences are contiguous and never repeated; completed runs carried every delta;
no 5xx outside a disruption window. It prints tables, a ``SUMMARY`` line, and exits 1 listing
each offending conversation/run with its evidence.

    nice .venv/bin/python bench/soak.py [--duration 600] [--conversations 40] [--kill-every 60]
        [--redis-restarts 2] [--seed 1]
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

from bench.harness.cluster import Instance, RestartableRedis, Window, Windows
from bench.harness.mock_upstream import prompt
from bench.harness.procs import ROOT, gateway_config, start_server
from bench.harness.soak_checks import (
    Accepted,
    Conversation,
    Finding,
    check,
    terminal_kind,
)
from bench.harness.stats import median, table

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
        await self.redis.start()
        config = gateway_config(
            self.upstream,
            backend="redis",
            redis_url=self.redis.url,
            gateway={
                "lease_ttl_seconds": self.opts.lease_ttl,
                "heartbeat_seconds": 2,
                "shutdown_grace_seconds": 1,
            },
        )
        self.instances = [Instance(name, config, self.directory) for name in ("A", "B")]
        await asyncio.gather(*(instance.start() for instance in self.instances))

    async def stop(self) -> None:
        await asyncio.gather(*(instance.stop() for instance in self.instances))
        await self.redis.stop()

    def plan(self) -> list[tuple[float, str]]:
        """(seconds after the start, "kill" | "redis") — Redis restarts halfway between kills."""
        duration, every = self.opts.duration, self.opts.kill_every
        steps: list[tuple[float, str]] = []
        k = 1
        while k * every < duration - 5:
            steps.append((k * every, "kill"))
            k += 1
        for j in range(self.opts.redis_restarts):
            target = (j + 1) * duration / (self.opts.redis_restarts + 1)
            half = round(target / every - 0.5) + 0.5
            steps.append((max(0.5, half) * every, "redis"))
        return sorted(s for s in steps if s[0] < duration - 5)

    async def chaos(self) -> None:
        redis_count = 0
        for offset, action in self.plan():
            await asyncio.sleep(max(0.0, self.t0 + offset - time.monotonic()))
            if action == "kill":
                instance = self.rng.choice(self.instances)
                window = self.windows.open(f"kill -9 {instance.name}")
                await instance.kill()
                await instance.start()
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
            f"A {self.instances[0].url}, B {self.instances[1].url}, redis {self.redis.url}, "
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

    # --- the report ---------------------------------------------------------------------

    def findings(self) -> list[Finding]:
        found = [f for conv in self.conversations for f in check(conv, self.t0, self.killed)]
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
        summary = (
            f"SUMMARY soak {self.opts.duration:g}s C={self.opts.conversations} "
            f"kills={sum(1 for w in self.windows.items if w.label.startswith('kill'))} "
            f"redis_restarts={sum(1 for w in self.windows.items if w.label.startswith('redis'))} "
            f"runs={len(accepted)} events={events} completed={kinds.get('completed', 0)} "
            f"cancelled={kinds.get('cancelled', 0)} failed={failed} instance_lost={lost} "
            f"5xx_in_windows={sum(in_5xx.values()) - outside} 5xx_outside={outside} "
            f"findings={len(findings)} ({categories or 'none'}) "
            f"{'PASS' if passed else 'FAIL'}"
        )
        return Result(passed, findings, summary, "\n\n".join(out))


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
    if result.passed:
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
    args = parser.parse_args(argv)
    opts = Options(
        duration=args.duration,
        conversations=args.conversations,
        kill_every=args.kill_every,
        redis_restarts=args.redis_restarts,
        seed=args.seed,
        lease_ttl=args.lease_ttl,
    )
    result = run_soak(opts)
    print(result.report)
    print(result.summary)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
