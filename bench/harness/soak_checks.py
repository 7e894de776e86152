"""What one soak conversation's client saw, and the end-of-soak checks over it (no I/O).

A client records every 202 (the runs it was promised) and every event its SSE stream delivered
(across reconnects). The checks: every accepted run ended with exactly one terminal event in
the stream and is terminal in ``GET …/state``; per run, the ``sequence`` numbers received are
0, 1, 2, … (none lost, none repeated); a completed run carried every delta the mock sent; no
run appeared that no 202 announced, except one that ended once after a POST of its conversation
went unanswered (accepted by an instance killed before its answer went out: ended
``gateway_instance_lost``, or adopted and run if it was queued; counted apart); a resume was
never answered with a snapshot.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Accepted",
    "Conversation",
    "Finding",
    "LogAudit",
    "Logged",
    "RunSeen",
    "audit_log",
    "check",
    "terminal_kind",
]

TERMINALS = frozenset({"run.completed", "run.failed", "run.cancelled"})
LOST = "gateway_instance_lost"
_ENDED = ("completed", "failed", "cancelled")
#: A run without a 202 first seen this long after an unanswered POST may be that POST's: a
#: queued run is adopted after the lease TTL and then waits for the runs ahead of it (answers of
#: up to 5 s each, other lapsed owners' runs to be reaped; 45 s seen on a loaded machine).
UNANSWERED_SPAN = 120.0


@dataclass
class Accepted:
    """A 202 of ``POST …/runs``."""

    run_id: str
    status: str  # started | queued
    instance: str  # the instance that answered the 202
    at: float  # monotonic, when the 202 arrived
    n: int  # deltas asked of the mock
    multitask: str
    attempts: int  # requests sent with its Idempotency-Key (1: no retry)


@dataclass
class RunSeen:
    """One run's events as the client's stream delivered them."""

    first_at: float
    sequences: list[int] = field(default_factory=list)
    terminals: list[tuple[str, str]] = field(default_factory=list)  # (type, code or reason)
    terminal_at: float | None = None
    deltas: int = 0


@dataclass
class Finding:
    category: str
    conversation: str
    run_id: str
    evidence: str


class Conversation:
    def __init__(self, key: str) -> None:
        self.key = key
        self.accepted: dict[str, Accepted] = {}
        #: Runs without a 202 that ended once (their instance died mid-POST).
        self.unannounced: set[str] = set()
        #: When a POST …/runs of this conversation got no answer (transport error).
        self.unanswered_posts: list[float] = []
        self.runs: dict[str, RunSeen] = {}
        self.events = 0
        self.reconnects = 0
        self.resume_snapshots: list[str] = []
        self.state: dict[str, Any] | None = None
        self.state_error = ""
        #: The SSE id of the last frame received: where a reconnect resumes.
        self.last_id: str | None = None
        self.subscribed = asyncio.Event()
        #: Every event received: (event id, run id, sequence, monotonic time), in order.
        self.received: list[tuple[str, str, int, float]] = []
        #: (monotonic time, "POST runs → A 503 backend_unavailable"): every POST and its answer.
        self.requests: list[tuple[float, str]] = []
        self._ended: dict[str, asyncio.Event] = {}

    def ended(self, run_id: str) -> asyncio.Event:
        return self._ended.setdefault(run_id, asyncio.Event())

    def record(self, event: dict[str, Any], at: float) -> None:
        self.events += 1
        run_id = str(event.get("runId"))
        seen = self.runs.get(run_id)
        if seen is None:
            seen = self.runs[run_id] = RunSeen(first_at=at)
        sequence = int(event.get("sequence", -1))
        seen.sequences.append(sequence)
        self.received.append((str(event.get("eventId")), run_id, sequence, at))
        kind = event.get("type")
        if kind == "message.delta":
            seen.deltas += 1
        elif kind in TERMINALS:
            payload = event.get("payload") or {}
            detail = ""
            if kind == "run.failed":
                detail = str((payload.get("error") or {}).get("code", ""))
            elif kind == "run.cancelled":
                detail = str(payload.get("reason", ""))
            seen.terminals.append((str(kind), detail))
            seen.terminal_at = at
            self.ended(run_id).set()


def terminal_kind(terminal: tuple[str, str]) -> str:
    """``completed``, ``cancelled``, ``failed:<code>`` or ``lost`` (gateway_instance_lost)."""
    kind, detail = terminal
    if kind == "run.failed":
        return "lost" if detail == LOST else f"failed:{detail}"
    return kind.removeprefix("run.")


def _gaps(sequences: list[int]) -> tuple[list[int], list[int]]:
    """(repeated, missing) sequence numbers, against 0..max."""
    counts = Counter(sequences)
    repeated = sorted(s for s, c in counts.items() if c > 1)
    top = max(sequences, default=-1)
    missing = [s for s in range(top + 1) if s not in counts]
    return repeated, missing


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 8 else f"{values[:8]}… ({len(values)})"


def requests_near(conv: Conversation, at: float, rel: float, span: float = 5.0) -> str:
    near = [f"t={t - rel:.1f}s {text}" for t, text in conv.requests if abs(t - at) <= span]
    return "; ".join(near) or "no request near"


def check(
    conv: Conversation, rel: float, killed: Callable[[str, float], bool] | None = None
) -> list[Finding]:
    """Every finding for ``conv``; ``rel`` turns a monotonic time into seconds since the start;
    ``killed(instance, since)`` tells whether that instance was killed after ``since``."""
    found: list[Finding] = []

    def add(category: str, run_id: str, evidence: str) -> None:
        found.append(Finding(category, conv.key, run_id, evidence))

    runs_in_state: dict[str, Any] = {}
    if conv.state is None:
        if conv.accepted:
            add("state unreadable", "-", conv.state_error)
    else:
        runs_in_state = conv.state.get("agentState", {}).get("runs", {})
    for run_id, accepted in conv.accepted.items():
        seen = conv.runs.get(run_id)
        where = (
            f"202 {accepted.status} from {accepted.instance} at t={accepted.at - rel:.1f}s "
            f"({accepted.multitask}, n={accepted.n}, attempts={accepted.attempts})"
        )
        terminals = [] if seen is None else seen.terminals
        in_state = runs_in_state.get(run_id)
        status = None if in_state is None else in_state.get("status")
        if not terminals:
            category = "accepted run never ended"
            if accepted.status == "queued":
                category = "queued run never ended"
                if killed is not None and killed(accepted.instance, accepted.at):
                    category += " (its instance was killed: not adopted yet)"
            events = 0 if seen is None else len(seen.sequences)
            add(
                category,
                run_id,
                f"{where}; {events} events received, none terminal; state status {status!r}; "
                f"requests: {requests_near(conv, accepted.at, rel)}",
            )
        elif len(terminals) > 1:
            add("several terminals", run_id, f"{where}; terminals {terminals}")
        if terminals and conv.state is not None and status not in _ENDED:
            add("state not terminal", run_id, f"{where}; state status {status!r}")
        if (
            seen is not None
            and len(terminals) == 1
            and terminals[0][0] == "run.completed"
            and seen.deltas != accepted.n
        ):
            add("completed run short", run_id, f"{where}; {seen.deltas}/{accepted.n} deltas")
    for run_id, seen in conv.runs.items():
        repeated, missing = _gaps(seen.sequences)
        if repeated:
            add("sequence repeated", run_id, f"repeated {_short(repeated)}")
        if missing:
            add(
                "sequence gap",
                run_id,
                f"missing {_short(missing)} of 0..{max(seen.sequences)}; "
                f"first event at t={seen.first_at - rel:.1f}s",
            )
        if run_id not in conv.accepted:
            kinds = [terminal_kind(t) for t in seen.terminals]
            unanswered = any(
                seen.first_at - UNANSWERED_SPAN <= t <= seen.first_at for t in conv.unanswered_posts
            )
            if len(kinds) == 1 and (kinds == ["lost"] or unanswered):
                # Accepted by an instance killed before its 202 went out (the client saw the
                # POST fail): the survivor ended it (lost), or adopted it (a queued run) and
                # ran it. Either way it ended once.
                conv.unannounced.add(run_id)
                continue
            add(
                "run without a 202",
                run_id,
                f"{len(seen.sequences)} events from t={seen.first_at - rel:.1f}s, "
                f"terminals {kinds}; requests: {requests_near(conv, seen.first_at, rel)}",
            )
    for evidence in conv.resume_snapshots:
        add("resume answered with a snapshot", "-", evidence)
    if conv.state is not None and conv.state.get("activeRunId") is not None:
        add("still active at the end", str(conv.state["activeRunId"]), "state activeRunId")
    return found


#: One event of a conversation's final log: (event id, run id, sequence).
Logged = tuple[str, str, int]


@dataclass
class LogAudit:
    """A conversation's final log against what its client received.

    ``lost``: (run id, sequence, when the client received it, or None when it never did) of an
    event that was written (a client received it, or a later sequence of its run is in the log)
    and is not in the final log. ``repeated``: (run id, sequence, when) of a sequence the log
    holds twice, or that the client received twice (the same event again, or another event
    under a sequence it already had: written again after a loss).
    """

    lost: list[tuple[str, int, float | None]] = field(default_factory=list)
    repeated: list[tuple[str, int, float | None]] = field(default_factory=list)


def audit_log(conv: Conversation, logged: list[Logged]) -> LogAudit:
    """What ``conv``'s final log (every entry, none trimmed) lost or holds twice; each (run,
    sequence) counted once."""
    in_log = {event_id for event_id, _, _ in logged}
    per_run: dict[str, Counter[int]] = {}
    for _, run_id, sequence in logged:
        per_run.setdefault(run_id, Counter())[sequence] += 1
    lost: dict[tuple[str, int], float | None] = {}
    repeated: dict[tuple[str, int], float | None] = {}
    first: set[tuple[str, int]] = set()
    for event_id, run_id, sequence, at in conv.received:
        key = (run_id, sequence)
        if event_id not in in_log:
            lost.setdefault(key, at)
        if key in first:
            repeated.setdefault(key, at)
        first.add(key)
    for run_id, counts in per_run.items():
        for sequence in range(max(counts) + 1):
            if sequence not in counts:
                lost.setdefault((run_id, sequence), None)
        for sequence, count in counts.items():
            if count > 1:
                repeated.setdefault((run_id, sequence), None)
    return LogAudit(
        [(run_id, sequence, at) for (run_id, sequence), at in sorted(lost.items())],
        [(run_id, sequence, at) for (run_id, sequence), at in sorted(repeated.items())],
    )
