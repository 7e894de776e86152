"""The soak's end-of-run checks find each kind of broken promise in what a client recorded."""

from __future__ import annotations

from typing import Any

from bench.harness.soak_checks import Accepted, Conversation, Logged, audit_log, check


def _event(run_id: str, sequence: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"runId": run_id, "sequence": sequence, "type": kind, "payload": payload}


def _accept(conv: Conversation, run_id: str, *, status: str = "started", n: int = 2) -> None:
    conv.accepted[run_id] = Accepted(run_id, status, "A", 1.0, n, "reject", 1)


def _full_run(conv: Conversation, run_id: str, deltas: int = 2) -> None:
    kinds = ["run.started", *["message.delta"] * deltas, "run.completed"]
    for sequence, kind in enumerate(kinds):
        conv.record(_event(run_id, sequence, kind), 2.0)


def _state(conv: Conversation, **runs: str) -> None:
    conv.state = {
        "activeRunId": None,
        "agentState": {"runs": {run_id: {"status": s} for run_id, s in runs.items()}},
    }


def _categories(conv: Conversation) -> list[str]:
    return sorted(finding.category for finding in check(conv, 0.0))


def test_a_clean_conversation_passes() -> None:
    conv = Conversation("c")
    _accept(conv, "r1")
    _full_run(conv, "r1")
    _state(conv, r1="completed")
    assert check(conv, 0.0) == []
    assert conv.ended("r1").is_set()


def test_lost_repeated_and_extra_terminals_are_found() -> None:
    conv = Conversation("c")
    _accept(conv, "gap")
    for sequence, kind in [(0, "run.started"), (2, "message.delta"), (3, "run.failed")]:
        conv.record(_event("gap", sequence, kind, error={"code": "gateway_instance_lost"}), 2.0)
    _accept(conv, "twice")
    _full_run(conv, "twice")
    conv.record(_event("twice", 3, "run.completed"), 3.0)
    _state(conv, gap="failed", twice="completed")
    assert _categories(conv) == ["sequence gap", "sequence repeated", "several terminals"]


def test_unended_runs_are_told_apart() -> None:
    conv = Conversation("c")
    _accept(conv, "started")
    conv.record(_event("started", 0, "run.started"), 2.0)
    _accept(conv, "queued", status="queued")
    _state(conv, started="running")
    conv.state = {**(conv.state or {}), "activeRunId": "started"}
    assert _categories(conv) == [
        "accepted run never ended",
        "queued run never ended",
        "still active at the end",
    ]
    killed = check(conv, 0.0, killed=lambda instance, since: instance == "A")
    assert "queued run never ended (its instance was killed: not adopted yet)" in {
        finding.category for finding in killed
    }


def test_a_run_nobody_accepted_a_short_completion_and_a_resume_snapshot_are_found() -> None:
    conv = Conversation("c")
    _accept(conv, "short", n=5)
    _full_run(conv, "short", deltas=3)
    _full_run(conv, "orphan")
    conv.resume_snapshots.append("GET events with Last-Event-ID x answered with a snapshot")
    _state(conv, short="completed", orphan="completed")
    assert _categories(conv) == [
        "completed run short",
        "resume answered with a snapshot",
        "run without a 202",
    ]


def test_a_terminal_run_the_state_does_not_know_is_found() -> None:
    conv = Conversation("c")
    _accept(conv, "r1")
    _full_run(conv, "r1")
    _state(conv)
    assert _categories(conv) == ["state not terminal"]


def test_a_run_without_a_202_that_ended_lost_is_counted_apart() -> None:
    # Its instance accepted it and died before the 202 went out; the survivor ended it.
    conv = Conversation("c")
    for sequence, kind in enumerate(["run.started", "run.failed"]):
        event = _event("orphan", sequence, kind)
        if kind == "run.failed":
            event["payload"] = {"error": {"code": "gateway_instance_lost"}}
        conv.record(event, 2.0)
    _state(conv, orphan="failed")
    assert _categories(conv) == []
    assert conv.unannounced == {"orphan"}


def test_a_completed_run_without_a_202_passes_only_after_an_unanswered_post() -> None:
    # A queued run whose instance died before answering is adopted and completes.
    conv = Conversation("c")
    _full_run(conv, "adopted")  # first seen at t=2.0
    _state(conv, adopted="completed")
    assert _categories(conv) == ["run without a 202"]  # no POST failed: nobody asked for it
    conv.unanswered_posts.append(1.0)
    assert _categories(conv) == []
    assert conv.unannounced == {"adopted"}


def _received(conv: Conversation, run_id: str, *events: tuple[str, int]) -> None:
    for n, (event_id, sequence) in enumerate(events):
        conv.record({**_event(run_id, sequence, "message.delta"), "eventId": event_id}, 10.0 + n)


def test_a_log_holding_every_event_received_once_loses_and_repeats_nothing() -> None:
    conv = Conversation("c")
    _received(conv, "r1", ("e0", 0), ("e1", 1), ("e2", 2))
    logged: list[Logged] = [("e0", "r1", 0), ("e1", "r1", 1), ("e2", "r1", 2), ("e3", "r1", 3)]
    audit = audit_log(conv, logged)
    assert (audit.lost, audit.repeated) == ([], [])


def test_events_a_failover_lost_are_counted_received_or_not() -> None:
    conv = Conversation("c")
    # The client had #0..#3; the new master's log lacks #2..#3 (the client got them) and #4
    # (nobody did), and the run went on with #5 on it.
    _received(conv, "r1", ("e0", 0), ("e1", 1), ("e2", 2), ("e3", 3))
    logged: list[Logged] = [("e0", "r1", 0), ("e1", "r1", 1), ("e5", "r1", 5)]
    audit = audit_log(conv, logged)
    assert audit.lost == [("r1", 2, 12.0), ("r1", 3, 13.0), ("r1", 4, None)]
    assert audit.repeated == []


def test_a_sequence_written_or_received_twice_is_a_repeat() -> None:
    conv = Conversation("c")
    # #1 received twice (the same event, then another one under #1: written again after the
    # loss of the first); the log holds #2 twice.
    _received(conv, "r1", ("e0", 0), ("e1", 1), ("e1", 1), ("e1b", 1))
    logged: list[Logged] = [
        ("e0", "r1", 0),
        ("e1b", "r1", 1),
        ("e2", "r1", 2),
        ("e2b", "r1", 2),
    ]
    audit = audit_log(conv, logged)
    assert audit.repeated == [("r1", 1, 12.0), ("r1", 2, None)]
    assert audit.lost == [("r1", 1, 11.0)]  # e1: received, gone from the log
