"""The backend contract: one abstract suite every backend runs (subclass and set ``make``).

Subclasses implement ``backend`` as an async fixture yielding a started backend with
``event_log_max_len = 5`` (so retention is observable).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import pytest

from app.backends import (
    EMPTY_CURSOR,
    Backend,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogItem,
)
from providers.contract import Command

LOG_MAX = 5


def meta() -> ConversationMeta:
    now = time.time() * 1000
    return ConversationMeta(session_id="ses_test", created_at=now, updated_at=now, title="t")


def event(run: str, seq: int, type_: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "protocolVersion": "0.1",
        "type": type_,
        "eventId": f"{run}:{seq}:{type_}",
        "sessionId": "ses_test",
        "runId": run,
        "sequence": seq,
        "timestamp": 1.0,
        "payload": payload or {},
    }


def run_events(run: str, deltas: int) -> list[dict[str, Any]]:
    events = [
        event(run, 0, "run.started"),
        event(run, 1, "message.started", {"messageId": "m", "role": "assistant"}),
    ]
    for i in range(deltas):
        events.append(event(run, 2 + i, "message.delta", {"messageId": "m", "delta": f"{i},"}))
    return events


class Control:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.aborts: list[str] = []
        self.commands: list[Command] = []

    def abort(self, reason: Literal["aborted", "interrupted", "shutdown"]) -> bool:
        self.aborts.append(reason)
        return True

    def deliver(self, command: Command) -> None:
        self.commands.append(command)


class BackendContract:
    """Subclass with a ``backend`` fixture; every test takes it."""

    async def test_missing_conversation(self, backend: Backend) -> None:
        ref = ConversationRef("p", "none")
        assert await backend.snapshot(ref) is None
        assert await backend.get_meta(ref) is None
        assert await backend.head_cursor(ref) == EMPTY_CURSOR
        result = await backend.read(ref, EMPTY_CURSOR, limit=10, wait=0)
        assert (result.status, result.entries) == ("ok", [])
        assert await backend.delete(ref) is False

    async def test_create_is_get_or_create(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        assert await backend.create_conversation(ref, meta()) is True
        other = meta()
        other.session_id = "ses_other"
        assert await backend.create_conversation(ref, other) is False
        stored = await backend.get_meta(ref)
        assert stored is not None and stored.session_id == "ses_test"

    async def test_append_reduces_and_snapshot_agrees_with_cursor(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        cursors = [(await backend.append_event(ref, e)).cursor for e in run_events("r1", 2)]
        assert len(set(cursors)) == 4
        snap = await backend.snapshot(ref)
        assert snap is not None
        assert snap.cursor == cursors[-1] == await backend.head_cursor(ref)
        message = next(iter(snap.state["messages"].values()))
        assert message["content"] == "0,1,"
        result = await backend.read(ref, EMPTY_CURSOR, limit=100, wait=0)
        assert [e.cursor for e in result.entries] == cursors
        assert [e.decoded()["sequence"] for e in result.entries] == [0, 1, 2, 3]

    @pytest.mark.parametrize("owned", [False, True])
    async def test_append_batch_logs_in_order_with_one_wake_up(
        self, backend: Backend, owned: bool
    ) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        if owned:  # the run owner's path (Redis: the live state and fenced writer)
            assert await backend.claim_run(ref, Control("r1")) is True
        waiting = asyncio.ensure_future(backend.read(ref, EMPTY_CURSOR, limit=100, wait=5))
        await asyncio.sleep(0)  # the reader is waiting before the batch lands
        events = run_events("r1", 2)
        items = [LogItem.of_event(e) for e in events[:2]]
        items.append(LogItem.of_extension("x", {"n": 1}))
        items += [LogItem.of_event(e) for e in events[2:]]
        entries = await backend.append_batch(ref, items)
        assert [e.kind for e in entries] == ["event", "event", "extension", "event", "event"]
        assert len({e.cursor for e in entries}) == 5
        woken = await asyncio.wait_for(waiting, 5)
        # The one wake-up delivers the whole batch, not its first entry.
        assert [e.cursor for e in woken.entries] == [e.cursor for e in entries]
        snap = await backend.snapshot(ref)
        assert snap is not None and snap.cursor == entries[-1].cursor
        assert snap.extensions == {"x": {"n": 1}}
        message = next(iter(snap.state["messages"].values()))
        assert message["content"] == "0,1,"
        assert await backend.append_batch(ref, []) == []

    async def test_run_issues_are_the_snapshots_issues_of_that_run(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        assert await backend.run_issues(ref, "r1") == []  # no conversation
        await backend.create_conversation(ref, meta())
        for run in ("r1", "r2"):
            events = run_events(run, 1)
            events.append(event(run, 3, "message.delta", {"messageId": "nope", "delta": "x"}))
            events.append(event(run, 2, "run.completed"))  # a sequence already used
            await backend.append_batch(ref, [LogItem.of_checked_event(e) for e in events])
        snap = await backend.snapshot(ref)
        assert snap is not None
        for run in ("r1", "r2"):
            expected = [i for i in snap.state["issues"] if i["runId"] == run]
            assert [i["code"] for i in expected] == ["missing_entity", "invalid_sequence"]
            assert await backend.run_issues(ref, run) == expected
        assert await backend.run_issues(ref, "r3") == []

    async def test_checked_items_reduce_like_unchecked_ones(self, backend: Backend) -> None:
        """Skipping the store's validation of runner-checked events changes no state, and an
        unchecked item (an event the gateway built or changed) is still validated."""
        plain, checked = ConversationRef("p", "plain"), ConversationRef("p", "checked")
        events = [*run_events("r1", 3), event("r1", 5, "run.completed")]
        for ref, of in ((plain, LogItem.of_event), (checked, LogItem.of_checked_event)):
            await backend.create_conversation(ref, meta())
            await backend.append_batch(ref, [of(e) for e in events])
        a, b = await backend.snapshot(plain), await backend.snapshot(checked)
        assert a is not None and b is not None
        assert a.state == b.state
        invalid = {**event("r2", 0, "run.started"), "timestamp": "soon"}
        await backend.append_batch(plain, [LogItem.of_event(invalid)])
        after = await backend.snapshot(plain)
        assert after is not None and "r2" not in after.state["runs"]

    async def test_read_after_cursor_in_order_with_limit(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        entries = [await backend.append_event(ref, e) for e in run_events("r1", 2)]
        result = await backend.read(ref, entries[0].cursor, limit=2, wait=0)
        assert result.status == "ok"
        assert [e.cursor for e in result.entries] == [entries[1].cursor, entries[2].cursor]
        tail = await backend.read(ref, entries[-1].cursor, limit=10, wait=0)
        assert (tail.status, tail.entries) == ("ok", [])

    async def test_reader_waits_for_new_entries(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        head = await backend.head_cursor(ref)
        reader = asyncio.create_task(backend.read(ref, head, limit=10, wait=60))
        await asyncio.sleep(0.05)
        assert not reader.done()
        entry = await backend.append_event(ref, event("r1", 0, "run.started"))
        result = await asyncio.wait_for(reader, 10)  # the append, not the 60 s wait
        assert [e.cursor for e in result.entries] == [entry.cursor]

    async def test_reader_on_empty_cursor_sees_creation(self, backend: Backend) -> None:
        ref = ConversationRef("p", "later")
        reader = asyncio.create_task(backend.read(ref, EMPTY_CURSOR, limit=10, wait=60))
        await asyncio.sleep(0.05)
        await backend.create_conversation(ref, meta())
        await backend.append_event(ref, event("r1", 0, "run.started"))
        result = await asyncio.wait_for(reader, 10)  # the append, not the 60 s wait
        assert result.status == "ok"
        assert [e.event_type for e in result.entries] == ["run.started"]

    async def test_retention_trims_and_reports_trimmed(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        entries = [await backend.append_event(ref, e) for e in run_events("r1", 8)]
        assert (await backend.read(ref, entries[0].cursor, limit=100, wait=0)).status == "trimmed"
        assert (await backend.read(ref, EMPTY_CURSOR, limit=100, wait=0)).status == "trimmed"
        recent = await backend.read(ref, entries[-LOG_MAX - 1].cursor, limit=100, wait=0)
        assert recent.status == "ok"
        assert [e.cursor for e in recent.entries] == [e.cursor for e in entries[-LOG_MAX:]]
        snap = await backend.snapshot(ref)
        assert snap is not None and snap.cursor == entries[-1].cursor

    async def test_cursor_of_another_conversation_or_incarnation_is_unknown(
        self, backend: Backend
    ) -> None:
        a, b = ConversationRef("p", "a"), ConversationRef("p", "b")
        for ref in (a, b):
            await backend.create_conversation(ref, meta())
            await backend.append_event(ref, event("r1", 0, "run.started"))
        cursor_a = await backend.head_cursor(a)
        assert (await backend.read(b, cursor_a, limit=10, wait=0)).status == "unknown"
        assert (await backend.read(a, "garbage", limit=10, wait=0)).status == "unknown"
        assert await backend.delete(a) is True
        assert await backend.snapshot(a) is None
        await backend.create_conversation(a, meta())
        await backend.append_event(a, event("r1", 0, "run.started"))
        assert (await backend.read(a, cursor_a, limit=10, wait=0)).status == "unknown"

    async def test_delete_wakes_readers_as_unknown(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        head = (await backend.append_event(ref, event("r1", 0, "run.started"))).cursor
        reader = asyncio.create_task(backend.read(ref, head, limit=10, wait=60))
        await asyncio.sleep(0.05)
        await backend.delete(ref)
        result = await asyncio.wait_for(reader, 10)  # the delete, not the 60 s wait
        assert result.status == "unknown"

    async def test_principals_are_isolated(self, backend: Backend) -> None:
        mine, theirs = ConversationRef("alice", "k"), ConversationRef("bob", "k")
        await backend.create_conversation(mine, meta())
        await backend.append_event(mine, event("r1", 0, "run.started"))
        assert await backend.snapshot(theirs) is None
        assert [k for k, _ in await backend.list_conversations("alice")] == ["k"]
        assert await backend.list_conversations("bob") == []

    async def test_extensions_are_logged_and_in_snapshot(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        entry = await backend.append_extension(ref, "agui.state", {"x": 1})
        await backend.append_extension(ref, "agui.state", {"x": 2})
        assert entry.kind == "extension"
        assert entry.decoded() == {"key": "agui.state", "value": {"x": 1}}
        snap = await backend.snapshot(ref)
        assert snap is not None and snap.extensions == {"agui.state": {"x": 2}}
        assert snap.state["runs"] == {}

    async def test_meta_round_trip(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        stored = await backend.get_meta(ref)
        assert stored is not None
        stored.last_input = {"prompt": "hi"}
        stored.transcripts["demo"] = {"threadId": "t1"}
        await backend.save_meta(ref, stored)
        again = await backend.get_meta(ref)
        assert again is not None
        assert again.last_input == {"prompt": "hi"}
        assert again.transcripts == {"demo": {"threadId": "t1"}}

    @pytest.mark.parametrize("title", [None, "t", 'é/\\"x\u2028'])
    async def test_a_meta_saved_keeping_the_title_keeps_a_title_set_meanwhile(
        self, backend: Backend, title: str | None
    ) -> None:
        """What a run's end saves: its own fields, under whatever title was set meanwhile."""
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        run_meta = await backend.get_meta(ref)
        assert run_meta is not None
        patched = await backend.get_meta(ref)
        assert patched is not None
        patched.title = title  # a PATCH during the run
        await backend.save_meta(ref, patched)
        run_meta.last_run_id = "r1"
        await backend.save_meta(ref, run_meta, keep_title=True)
        stored = await backend.get_meta(ref)
        assert stored is not None
        assert (stored.title, stored.last_run_id) == (title, "r1")
        assert run_meta.title == title  # the caller's meta says what was saved
        run_meta.last_run_id = "r2"  # the title unchanged since: saved as it is
        await backend.save_meta(ref, run_meta, keep_title=True)
        stored = await backend.get_meta(ref)
        assert stored is not None and (stored.title, stored.last_run_id) == (title, "r2")

    async def test_restore_seeds_state_once_and_the_log_continues(self, backend: Backend) -> None:
        source = ConversationRef("p", "source")
        await backend.create_conversation(source, meta())
        for e in run_events("r1", 2):
            await backend.append_event(source, e)
        await backend.append_extension(source, "agui.state", {"x": 1})
        archived = await backend.snapshot(source)
        assert archived is not None
        ref = ConversationRef("p", "restored")
        state, extensions = dict(archived.state), dict(archived.extensions)
        assert await backend.restore_conversation(ref, meta(), state, extensions) is True
        other = meta()
        other.session_id = "ses_other"
        assert await backend.restore_conversation(ref, other, {}, {}) is False
        stored = await backend.get_meta(ref)
        assert stored is not None and stored.session_id == "ses_test"
        snap = await backend.snapshot(ref)
        assert snap is not None
        assert snap.state == archived.state and snap.extensions == {"agui.state": {"x": 1}}
        assert sorted(k for k, _ in await backend.list_conversations("p")) == ["restored", "source"]
        # The restored state is the reducer's: the next events continue it, and the log
        # holds only what came after the restore.
        head = await backend.head_cursor(ref)
        delta = event("r1", 4, "message.delta", {"messageId": "m", "delta": "2,"})
        await backend.append_event(ref, delta)
        after = await backend.snapshot(ref)
        assert after is not None
        assert next(iter(after.state["messages"].values()))["content"] == "0,1,2,"
        result = await backend.read(ref, head, limit=10, wait=0)
        assert [e.decoded()["sequence"] for e in result.entries] == [4]

    async def test_run_slot_abort_and_commands(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        first, second = Control("r1"), Control("r2")
        assert await backend.claim_run(ref, first) is True
        assert await backend.claim_run(ref, second) is False
        assert await backend.active_run(ref) == "r1"
        assert await backend.request_abort(ref, "other", "aborted") is None
        assert await backend.request_abort(ref, None, "interrupted") == "r1"
        command = Command("approval.resolve", {"approvalId": "a", "decision": "approved"})
        assert await backend.send_command(ref, "r1", command) is True
        assert await backend.send_command(ref, "r2", command) is False
        assert first.aborts == ["interrupted"] and first.commands == [command]
        await backend.release_run(ref, "r1")
        assert await backend.active_run(ref) is None
        assert await backend.request_abort(ref, None, "aborted") is None
        assert await backend.claim_run(ref, second) is True

    async def test_idempotency_records(self, backend: Backend) -> None:
        record = IdempotencyRecord("fp", 202, {"runId": "r1"})
        assert await backend.idempotency_get("scope") is None
        assert await backend.idempotency_put("scope", record, 60) is True
        assert await backend.idempotency_put("scope", IdempotencyRecord("x", 202, {}), 60) is False
        assert await backend.idempotency_get("scope") == record

    async def test_frames_are_serialized_once(self, backend: Backend) -> None:
        ref = ConversationRef("p", "c")
        await backend.create_conversation(ref, meta())
        entry = await backend.append_event(ref, event("r1", 0, "run.started"))
        assert entry.sse is entry.sse and entry.ws is entry.ws
        assert entry.sse.startswith(b"id: " + entry.cursor.encode() + b"\ndata: {")
        assert b"event:" not in entry.sse


__all__ = ["LOG_MAX", "BackendContract", "pytest"]
