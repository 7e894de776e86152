"""app/runs/ending.py: the decision table of a run's end, and the run-end hooks that follow it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.backends import EMPTY_CURSOR, ConversationMeta, ConversationRef, LogItem
from app.backends.memory import MemoryBackend
from app.backends.redis.lost_run import lost_run_events
from app.runs.ending import (
    PROVIDER_ERROR,
    RunEndHooks,
    close_unterminated,
    decide,
    decide_end,
    terminal_event,
)
from app.runs.execute import ActiveRun
from providers.contract import AgentEvent
from tests.app.support.backend_contract import run_events

REF = ConversationRef("alice", "k")
ERROR = {"code": "upstream_error", "message": "boom"}


def own_terminal(type_: str, payload: dict[str, Any]) -> AgentEvent:
    return {
        "protocolVersion": "0.1",
        "type": type_,
        "eventId": f"r1:7:{type_}",
        "sessionId": "s",
        "runId": "r1",
        "sequence": 7,
        "timestamp": 1.0,
        "payload": payload,
    }


# (the run's own terminal, the abort accepted) -> (the terminal logged, its payload)
TABLE = [
    (("run.completed", {}), None, ("run.completed", {})),
    (("run.failed", {"error": ERROR}), None, ("run.failed", {"error": ERROR})),
    (("run.completed", {}), "aborted", ("run.cancelled", {"reason": "aborted"})),
    (("run.failed", {"error": ERROR}), "shutdown", ("run.cancelled", {"reason": "shutdown"})),
    (("run.cancelled", {"reason": "aborted"}), None, ("run.cancelled", {"reason": "aborted"})),
    (
        ("run.cancelled", {"reason": "aborted"}),
        "interrupted",
        ("run.cancelled", {"reason": "aborted"}),
    ),
]


@pytest.mark.parametrize(("own", "abort", "logged"), TABLE)
def test_the_decision_table(
    own: tuple[str, dict[str, Any]], abort: str | None, logged: tuple[str, dict[str, Any]]
) -> None:
    event = own_terminal(*own)
    decided = decide(event, abort)
    assert (decided["type"], decided["payload"]) == logged
    if decided["type"] == event["type"]:
        assert decided is event  # as it is: the runner's checked event, unchanged
    else:  # a new event of the same place in the run, told apart by its id
        assert decided["eventId"] == f"{event['eventId']}:cancelled"
        rest = {k: v for k, v in decided.items() if k not in ("type", "eventId", "payload")}
        assert rest == {k: v for k, v in event.items() if k not in ("type", "eventId", "payload")}


def test_a_lost_owner_ends_the_run_failed_gateway_instance_lost() -> None:
    """The last row: what the reaper logs (app/backends/redis/lost_run.py)."""
    events = lost_run_events({}, "r1", now_ms=1.0, session_id="s")
    assert [e["type"] for e in events] == ["run.started", "run.failed"]
    assert events[-1]["payload"]["error"] == {
        "code": "gateway_instance_lost",
        "message": "The gateway instance running this run was lost.",
        "retryable": True,
    }


def test_a_gateway_terminal_continues_the_runs_numbering() -> None:
    state = {"lastSequenceByRun": {"r1": 4}}
    event = terminal_event(state, "s", "r1", "run.failed", {"error": PROVIDER_ERROR})
    assert (event["sequence"], event["eventId"]) == (5, "r1:5:run.failed")
    first = terminal_event({}, "s", "r2", "run.started", {})
    assert (first["sequence"], first["eventId"]) == (0, "r2:0:run.started")


class EndElsewhere(MemoryBackend):
    """A backend where an abort of the run was accepted on another instance."""

    def __init__(self, reason: str | None) -> None:
        super().__init__()
        self.reason = reason

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        return self.reason


async def logged_events(backend: MemoryBackend) -> list[dict[str, Any]]:
    entries = (await backend.read(REF, EMPTY_CURSOR, limit=100, wait=0)).entries
    return [orjson.loads(entry.data) for entry in entries]


async def started_backend(reason: str | None = None) -> EndElsewhere:
    backend = EndElsewhere(reason)
    await backend.create_conversation(REF, ConversationMeta("ses_test", 1.0, 1.0))
    await backend.append_batch(REF, [LogItem.of_event(e) for e in run_events("r1", 3)])
    return backend


@pytest.mark.parametrize(
    ("local", "elsewhere", "logged"),
    [
        (None, None, ("run.completed", {})),
        ("aborted", None, ("run.cancelled", {"reason": "aborted"})),
        (None, "interrupted", ("run.cancelled", {"reason": "interrupted"})),
        ("shutdown", "aborted", ("run.cancelled", {"reason": "shutdown"})),  # ours is first
    ],
)
async def test_the_owner_decides_with_the_aborts_accepted_here_and_elsewhere(
    local: Any, elsewhere: str | None, logged: tuple[str, dict[str, Any]]
) -> None:
    backend = await started_backend(elsewhere)
    active = ActiveRun("r1")
    if local is not None:
        assert active.abort(local)
    decided = await decide_end(backend, REF, active, own_terminal("run.completed", {}))
    assert (decided["type"], decided["payload"]) == logged
    assert active.ending
    assert not active.abort("aborted")  # decided: an abort now comes too late


@pytest.mark.parametrize(
    ("abort", "logged"),
    [
        (None, ("run.failed", {"error": PROVIDER_ERROR})),
        ("aborted", ("run.cancelled", {"reason": "aborted"})),
    ],
)
async def test_a_run_the_provider_left_without_a_terminal(
    abort: Any, logged: tuple[str, dict[str, Any]]
) -> None:
    backend = await started_backend()
    active = ActiveRun("r1")
    if abort is not None:
        active.abort(abort)
    await close_unterminated(backend, REF, "ses_test", active)
    snapshot = await backend.snapshot(REF)
    assert snapshot is not None
    run = snapshot.state["runs"]["r1"]
    assert run["status"] == logged[0].removeprefix("run.")
    last = (await logged_events(backend))[-1]
    assert (last["type"], last["payload"]) == logged


async def test_a_run_that_never_started_is_started_then_ended() -> None:
    backend = EndElsewhere(None)
    await backend.create_conversation(REF, ConversationMeta("ses_test", 1.0, 1.0))
    error = {"code": "unknown_provider", "message": "gone"}
    await close_unterminated(backend, REF, "ses_test", ActiveRun("r1"), error)
    events = await logged_events(backend)
    assert [(e["type"], e["payload"]) for e in events] == [
        ("run.started", {}),
        ("run.failed", {"error": error}),
    ]


class Calls:
    """The archive's and the webhooks' run-end hooks, recorded in one list (their order)."""

    def __init__(self, *, fail: str = "") -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail
        self.enabled = True

    def run_ended(self, ref: ConversationRef, *rest: Any) -> Any:
        if not rest:  # Archive.run_ended(ref): synchronous
            self.calls.append(("archive", ref))
            if self.fail == "archive":
                raise RuntimeError("archive down")
            return None
        return self._webhook("ended", ref, *rest)

    async def run_lost(self, ref: ConversationRef, run_id: str, run: dict[str, Any]) -> None:
        await self._webhook("lost", ref, run_id, run)

    async def _webhook(self, kind: str, ref: ConversationRef, *rest: Any) -> None:
        self.calls.append(("webhook", kind, ref, *rest))
        if self.fail == "webhook":
            raise RuntimeError("outbox down")


def hooks(calls: Calls) -> RunEndHooks:
    return RunEndHooks(calls, calls)  # type: ignore[arg-type]


async def test_the_owner_and_the_reaper_run_the_same_hooks() -> None:
    owner, reaper = Calls(), Calls()
    await hooks(owner).owner_ended(REF, "r1")
    record = {"status": "failed"}
    await hooks(reaper).run_lost(REF, "r1", record)  # before the reaper logs the end
    await hooks(reaper).lost_run_ended(REF, "r1")  # after
    assert owner.calls == [("archive", REF), ("webhook", "ended", REF, "r1")]
    assert sorted(map(str, reaper.calls)) == sorted(
        map(str, [("archive", REF), ("webhook", "lost", REF, "r1", record)])
    )
    assert reaper.calls[0][0] == "webhook"  # handed over before the slot is released


@pytest.mark.parametrize("fail", ["archive", "webhook"])
async def test_a_failing_hook_does_not_stop_the_others(fail: str) -> None:
    calls = Calls(fail=fail)
    await hooks(calls).owner_ended(REF, "r1")  # does not raise
    assert [call[0] for call in calls.calls] == ["archive", "webhook"]


def test_no_hook_is_on_without_an_archive_or_webhooks() -> None:
    off = Calls()
    off.enabled = False  # [webhooks] url empty
    assert not RunEndHooks().any
    assert not RunEndHooks(None, off).any  # type: ignore[arg-type]
    assert RunEndHooks(off, None).any  # type: ignore[arg-type]
