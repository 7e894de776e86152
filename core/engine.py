"""The store's indexed, mutable form of an AgentState, with an undo journal.

Same rules and results as the pure fold (``core.reducer``), but each event costs O(size of the
event): maps are updated in place, streamed text is kept as a list of chunks (joined when a
snapshot or an entity is read), and a strict batch records an undo journal so it can roll back.
Snapshots are built lazily, reuse the entity dicts that did not change, and never alias the
mutable internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from core import issues as msgs
from core.issues import AgentProtocolError, AgentProtocolIssue, IssueCode, make_issue
from core.keys import run_key_prefix
from core.kinds import ENTITY_MAPS, EVENT_ENTITY_KIND, ID_FIELDS, START_TYPES, TERMINAL_STATUSES
from core.processed import ProcessedIds, RunIds, Token
from core.state import STATE_KEYS, AgentState
from core.transitions import follow_up, start_entity

__all__ = ["ACCEPTED", "DUPLICATE", "REJECTED", "Engine", "Text"]

ACCEPTED: Final = 0
DUPLICATE: Final = 1
REJECTED: Final = 2

_MISSING: Any = object()
#: Streamed text: every this many chunks, the newest ones are joined into one.
_MERGE_EVERY: Final = 64
_SET: Final = 0  # (0, container, key, old) -> restore old or delete
_TRUNC: Final = 1  # (1, list, n) -> del list[n:]
_UNPROCESS: Final = 2  # (2, processed, token) -> remove the token added last

#: The maps whose records hold streamed text (kind -> field).
_TEXT_FIELDS: Final[dict[str, str]] = {
    "messages": "content",
    "reasoning": "content",
    "toolCalls": "arguments",
}
#: Text-delta event type -> (state map, payload id field); message.delta with a string delta
#: on string content takes the same hot path.
_TEXT_DELTA_MAPS: Final[dict[str, str]] = {
    "message.delta": "messages",
    "reasoning.delta": "reasoning",
    "tool.arguments_delta": "toolCalls",
}
_TEXT_DELTA_IDS: Final[dict[str, str]] = {
    "message.delta": "messageId",
    "reasoning.delta": "reasoningId",
    "tool.arguments_delta": "toolCallId",
}
_MAP_NAMES: Final[tuple[str, ...]] = ("sessions", "runs", *ENTITY_MAPS.values())
_RUN_TERMINAL_FIELD: Final[dict[str, str]] = {
    "run.completed": "",
    "run.failed": "error",
    "run.cancelled": "reason",
}


class Text:
    """Streamed text as a list of chunks; ``value()`` joins them."""

    __slots__ = ("chunks", "loose")

    def __init__(self, first: str) -> None:
        self.chunks: list[str] = [first]
        #: Chunks appended (outside a journal) since the last merge: the newest ``loose``
        #: chunks are all small, so merging them never copies the text merged before.
        self.loose = 0

    def value(self) -> str:
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return "".join(chunks)

    def compact(self) -> str:
        """Join the chunks and keep the result as the only chunk."""
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        joined = "".join(chunks)
        chunks[:] = [joined]
        self.loose = 0
        return joined


class _Stream:
    """The open entity a delta type last streamed into: all its next delta needs.

    Valid until a record, run or session is put, a message's text content replaced by parts,
    the state loaded or a journal begun or rolled back (``Engine._streams`` is then cleared);
    the hot path re-checks what an event may differ in: type, run, session, entity id, delta
    type, sequence, event id, processed id.
    """

    __slots__ = (
        "code",
        "dirty",
        "entity_id",
        "id_field",
        "ids",
        "key",
        "record",
        "run_id",
        "session_id",
        "text",
    )

    def __init__(
        self,
        event: Mapping[str, Any],
        id_field: str,
        token: tuple[RunIds, int, int],
        record: dict[str, Any],
        text: Text,
        dirty: dict[str, None],
        key: str,
    ) -> None:
        self.run_id: str = event["runId"]
        self.session_id: str = event["sessionId"]
        self.id_field = id_field
        self.entity_id: str = event["payload"][id_field]
        self.ids = token[0]
        self.code = token[2]
        self.record = record
        self.text = text
        self.dirty = dirty
        self.key = key


def _internal_text(record: dict[str, Any], field: str) -> None:
    value = record.get(field)
    if isinstance(value, str):
        record[field] = Text(value)
    elif isinstance(value, list):
        record[field] = list(value)


class Engine:
    """Mutable AgentState with per-event cost independent of the state's size."""

    __slots__ = (
        "_dirty",
        "_flat_version",
        "_snap",
        "_snap_flat",
        "_snap_maps",
        "_streams",
        "_version",
        "entities",
        "issues",
        "journal",
        "last_seq",
        "order",
        "processed",
        "runs",
        "sessions",
        "strict",
    )

    def __init__(self, state: Mapping[str, Any] | None = None, *, strict: bool = False) -> None:
        self.strict = strict
        self.journal: list[tuple[Any, ...]] | None = None
        self.load(state)

    # --- loading and reading ------------------------------------------------------------------

    def load(self, state: Mapping[str, Any] | None) -> None:
        """Replace everything with ``state`` (plain AgentState data; None = empty)."""
        src: Mapping[str, Any] = state if state is not None else {}
        self.sessions: dict[str, dict[str, Any]] = dict(src.get("sessions", {}))
        self.runs: dict[str, dict[str, Any]] = dict(src.get("runs", {}))
        self.entities: dict[str, dict[str, dict[str, Any]]] = {}
        for map_name in ENTITY_MAPS.values():
            records = {key: dict(rec) for key, rec in src.get(map_name, {}).items()}
            text_field = _TEXT_FIELDS.get(map_name)
            if text_field is not None:
                for rec in records.values():
                    _internal_text(rec, text_field)
            self.entities[map_name] = records
        self.order: list[dict[str, Any]] = list(src.get("order", []))
        self.issues: list[AgentProtocolIssue] = list(src.get("issues", []))
        self.processed = ProcessedIds.from_dict(src.get("processedEventIds", {}))
        self.last_seq: dict[str, Any] = dict(src.get("lastSequenceByRun", {}))
        self.journal = None
        #: delta type -> the entity it streamed into last (see ``_Stream``).
        self._streams: dict[str, _Stream] = {}
        self._dirty: dict[str, dict[str, None]] = {name: {} for name in _MAP_NAMES}
        self._snap_maps: dict[str, dict[str, Any]] = {}
        self._snap: AgentState | None = None
        self._snap_flat: dict[str, Any] = {}
        self._version = 0
        self._flat_version = -1

    def materialize(self, map_name: str, record: dict[str, Any]) -> dict[str, Any]:
        """A plain copy of an internal record (streamed text joined)."""
        field = _TEXT_FIELDS.get(map_name)
        if field is None:
            return record
        out = dict(record)
        value = record.get(field)
        if type(value) is Text:
            out[field] = value.compact() if self.journal is None else value.value()
        elif type(value) is list:
            out[field] = list(value)
        return out

    def snapshot(self) -> AgentState:
        """Plain JSON AgentState, cached until the next change."""
        snap = self._snap
        if snap is not None:
            return snap
        maps: dict[str, dict[str, Any]] = {}
        for name in _MAP_NAMES:
            internal = self._map(name)
            previous = self._snap_maps.get(name)
            dirty = self._dirty[name]
            if previous is None:
                built = {key: self.materialize(name, rec) for key, rec in internal.items()}
            elif dirty:
                built = dict(previous)
                for key in dirty:
                    rec = internal.get(key)
                    if rec is None:
                        built.pop(key, None)
                    else:
                        built[key] = self.materialize(name, rec)
            else:
                built = previous
            dirty.clear()
            maps[name] = built
        self._snap_maps = maps
        if self._flat_version != self._version:
            self._snap_flat = {
                "order": list(self.order),
                "issues": list(self.issues),
                "processedEventIds": self.processed.to_dict(),
                "lastSequenceByRun": dict(self.last_seq),
            }
            self._flat_version = self._version
        snap = {key: maps[key] if key in maps else self._snap_flat[key] for key in STATE_KEYS}
        self._snap = snap
        return snap

    def _map(self, name: str) -> dict[str, dict[str, Any]]:
        if name == "sessions":
            return self.sessions
        if name == "runs":
            return self.runs
        return self.entities[name]

    # --- journal --------------------------------------------------------------------------------

    def begin(self) -> None:
        self.journal = []
        self._streams.clear()

    def commit(self) -> None:
        self.journal = None

    def rollback(self) -> None:
        journal = self.journal
        self.journal = None
        self._streams.clear()
        if not journal:
            return
        for entry in reversed(journal):
            if entry[0] == _SET:
                _, container, key, old = entry
                if old is _MISSING:
                    container.pop(key, None)
                else:
                    container[key] = old
            elif entry[0] == _UNPROCESS:
                entry[1].pop_last(entry[2])
            else:
                _, items, length = entry
                del items[length:]
        self._changed()

    def _changed(self) -> None:
        self._snap = None
        self._version += 1

    # --- applying events ----------------------------------------------------------------------

    def apply(self, event: Mapping[str, Any]) -> int:
        """Apply one *valid* event: ACCEPTED, DUPLICATE or REJECTED (strict: raises)."""
        etype: str = event["type"]
        stream = self._streams.get(etype)
        if stream is not None:
            # Hot path: the next text delta of the entity this type streamed into last.
            # Every check the general path would make, on cached objects (the saving: see
            # BENCHMARKS.md, "Costs behind the code's shortcuts").
            # (``sequence > last`` is implied by add_next while every id is compact; kept as
            # the general path's rule 2, one dict read.)
            payload = event["payload"]
            run_id = stream.run_id
            sequence = event["sequence"]
            delta = payload["delta"]
            if (
                type(delta) is str
                and type(sequence) is int
                and payload[stream.id_field] == stream.entity_id
                and event["runId"] == run_id
                and event["sessionId"] == stream.session_id
                and sequence > self.last_seq[run_id]
                and event["eventId"] == f"{run_id}:{sequence}:{etype}"
                and self.processed.add_next(stream.ids, sequence, stream.code)
            ):
                text = stream.text
                chunks = text.chunks
                chunks.append(delta)
                text.loose += 1
                if text.loose == _MERGE_EVERY:
                    chunks[-_MERGE_EVERY:] = ["".join(chunks[-_MERGE_EVERY:])]
                    text.loose = 0
                stream.record["updatedAt"] = event["timestamp"]
                stream.dirty[stream.key] = None
                self.last_seq[run_id] = sequence
                self._snap = None
                self._version += 1
                return ACCEPTED
        return self._apply_general(event, etype)

    def _apply_general(self, event: Mapping[str, Any], etype: str) -> int:
        run_id: str = event["runId"]
        prefix = run_key_prefix(run_id)
        sequence = event["sequence"]
        ekey = self.processed.new_token(prefix, run_id, event["eventId"], sequence, etype)
        if ekey is None:
            return DUPLICATE
        last = self.last_seq.get(run_id)
        if last is not None and sequence <= last:
            return self._reject(
                event, ekey, "invalid_sequence", msgs.msg_sequence(sequence, last, run_id)
            )
        run = self.runs.get(run_id)
        if run is not None:
            if run["sessionId"] != event["sessionId"] and etype != "session.started":
                return self._reject(
                    event,
                    ekey,
                    "invalid_transition",
                    msgs.msg_session_mismatch(run_id, run["sessionId"], event["sessionId"]),
                )
            if run["status"] != "running" and etype != "session.started" and etype != "run.started":
                return self._reject(
                    event,
                    ekey,
                    "invalid_transition",
                    msgs.msg_run_not_running(run_id, run["status"]),
                )
        return _HANDLERS[etype](self, event, etype, prefix, ekey, run)

    def _reject(self, event: Mapping[str, Any], ekey: Token, code: IssueCode, message: str) -> int:
        issue = make_issue(code, event["eventId"], event["runId"], message)
        if self.strict:
            raise AgentProtocolError(issue)
        journal = self.journal
        if journal is not None:
            journal.append((_UNPROCESS, self.processed, ekey))
            journal.append((_TRUNC, self.issues, len(self.issues)))
        self.processed.add(ekey)
        self.issues.append(issue)
        self._changed()
        return REJECTED

    def _accept(self, ekey: Token, run_id: str, sequence: Any) -> int:
        journal = self.journal
        if journal is not None:
            journal.append((_UNPROCESS, self.processed, ekey))
            journal.append((_SET, self.last_seq, run_id, self.last_seq.get(run_id, _MISSING)))
        self.processed.add(ekey)
        self.last_seq[run_id] = sequence
        self._snap = None
        self._version += 1
        return ACCEPTED

    def _put(self, name: str, container: dict[str, Any], key: str, record: Any) -> None:
        journal = self.journal
        if journal is not None:
            journal.append((_SET, container, key, container.get(key, _MISSING)))
        container[key] = record
        self._dirty[name][key] = None
        if self._streams:  # a record, run or session changed: no cached stream is sure
            self._streams.clear()

    def _require_run(
        self, event: Mapping[str, Any], ekey: Token, run: dict[str, Any] | None
    ) -> int | None:
        if run is None:
            return self._reject(
                event, ekey, "missing_run", msgs.msg_missing_run(event["runId"], event["type"])
            )
        if run["sessionId"] != event["sessionId"]:  # pragma: no cover - rule 3 rejects first
            return self._reject(
                event,
                ekey,
                "invalid_transition",
                msgs.msg_session_mismatch(event["runId"], run["sessionId"], event["sessionId"]),
            )
        return None

    def _on_session_started(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        session_id: str = event["sessionId"]
        if session_id in self.sessions:
            return self._reject(
                event, ekey, "duplicate_entity", msgs.msg_duplicate_session(session_id)
            )
        payload: Mapping[str, Any] = event["payload"]
        session: dict[str, Any] = {"id": session_id}
        if "title" in payload:
            session["title"] = payload["title"]
        session["createdAt"] = event["timestamp"]
        self._put("sessions", self.sessions, session_id, session)
        return self._accept(ekey, event["runId"], event["sequence"])

    def _on_run_started(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        run_id: str = event["runId"]
        if run is not None:
            return self._reject(event, ekey, "duplicate_entity", msgs.msg_duplicate_run(run_id))
        payload: Mapping[str, Any] = event["payload"]
        record: dict[str, Any] = {
            "id": run_id,
            "sessionId": event["sessionId"],
            "status": "running",
        }
        if "input" in payload:
            record["input"] = payload["input"]
        record["createdAt"] = event["timestamp"]
        record["updatedAt"] = event["timestamp"]
        self._put("runs", self.runs, run_id, record)
        return self._accept(ekey, run_id, event["sequence"])

    def _on_run_terminal(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        problem = self._require_run(event, ekey, run)
        if problem is not None:
            return problem
        payload: Mapping[str, Any] = event["payload"]
        record = dict(run)
        record["status"] = etype[4:]
        if etype == "run.completed":
            for field in ("output", "usage"):
                if field in payload:
                    record[field] = payload[field]
                else:
                    record.pop(field, None)
        else:
            field = _RUN_TERMINAL_FIELD[etype]
            if field in payload:
                record[field] = payload[field]
            else:
                record.pop(field, None)
        record["updatedAt"] = event["timestamp"]
        self._put("runs", self.runs, event["runId"], record)
        return self._accept(ekey, event["runId"], event["sequence"])

    def _on_start(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        problem = self._require_run(event, ekey, run)
        if problem is not None:
            return problem
        kind = START_TYPES[etype]
        map_name = ENTITY_MAPS[kind]
        entity_id: str = event["payload"][ID_FIELDS[kind]]
        key = prefix + entity_id
        entities = self.entities[map_name]
        if key in entities:
            return self._reject(
                event, ekey, "duplicate_entity", msgs.msg_duplicate_entity(kind, entity_id)
            )
        record = start_entity(kind, entity_id, event)
        text_field = _TEXT_FIELDS.get(map_name)
        if text_field is not None:
            _internal_text(record, text_field)
        self._put(map_name, entities, key, record)
        journal = self.journal
        if journal is not None:
            journal.append((_TRUNC, self.order, len(self.order)))
        self.order.append({"kind": kind, "id": entity_id, "runId": event["runId"]})
        return self._accept(ekey, event["runId"], event["sequence"])

    def _entity(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token
    ) -> tuple[str, str, dict[str, Any]] | int:
        """(map name, key, record) of a follow-up's entity, or the outcome of its rejection."""
        kind = EVENT_ENTITY_KIND[etype]
        map_name = ENTITY_MAPS[kind]
        entity_id: str = event["payload"][ID_FIELDS[kind]]
        key = prefix + entity_id
        record = self.entities[map_name].get(key)
        if record is None:
            return self._reject(
                event, ekey, "missing_entity", msgs.msg_missing_entity(kind, entity_id)
            )
        status = record["status"]
        if status in TERMINAL_STATUSES:
            return self._reject(
                event,
                ekey,
                "invalid_transition",
                msgs.msg_terminal_entity(kind, entity_id, status),
            )
        return map_name, key, record

    def _on_follow_up(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        found = self._entity(event, etype, prefix, ekey)
        if type(found) is int:
            return found
        map_name, key, record = found  # type: ignore[misc]
        self._put(map_name, self.entities[map_name], key, follow_up(record, event))
        return self._accept(ekey, event["runId"], event["sequence"])

    def _touch(self, map_name: str, key: str, record: dict[str, Any], timestamp: Any) -> None:
        journal = self.journal
        if journal is not None:
            journal.append((_SET, record, "updatedAt", record["updatedAt"]))
        record["updatedAt"] = timestamp
        self._dirty[map_name][key] = None

    def _append_text(self, text: Text, delta: str) -> None:
        chunks = text.chunks
        journal = self.journal
        if journal is not None:
            journal.append((_TRUNC, chunks, len(chunks)))
            chunks.append(delta)
            return
        chunks.append(delta)
        text.loose += 1
        if text.loose == _MERGE_EVERY:
            # Bound the per-chunk overhead: fold the last small chunks into one string
            # (O(_MERGE_EVERY) every _MERGE_EVERY appends, so still O(1) per delta; the
            # text merged before stays its own chunk, never copied again).
            chunks[-_MERGE_EVERY:] = ["".join(chunks[-_MERGE_EVERY:])]
            text.loose = 0

    def _on_text_delta(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        if self.journal is None:
            # Hot path (inlined): an append to a streaming entity, outside a strict batch.
            map_name = _TEXT_DELTA_MAPS[etype]
            key = prefix + event["payload"][_TEXT_DELTA_IDS[etype]]
            record = self.entities[map_name].get(key)
            if record is not None and record["status"] not in TERMINAL_STATUSES:
                field = _TEXT_FIELDS[map_name]
                text = record[field]
                if type(text) is Text:
                    chunks = text.chunks
                    chunks.append(event["payload"]["delta"])
                    text.loose += 1
                    if text.loose == _MERGE_EVERY:
                        chunks[-_MERGE_EVERY:] = ["".join(chunks[-_MERGE_EVERY:])]
                        text.loose = 0
                    record["updatedAt"] = event["timestamp"]
                    dirty = self._dirty[map_name]
                    dirty[key] = None
                    if type(ekey) is tuple and run is not None:
                        field = _TEXT_DELTA_IDS[etype]
                        self._streams[etype] = _Stream(event, field, ekey, record, text, dirty, key)
                    self.processed.add(ekey)
                    self.last_seq[event["runId"]] = event["sequence"]
                    self._snap = None
                    self._version += 1
                    return ACCEPTED
        found = self._entity(event, etype, prefix, ekey)
        if type(found) is int:
            return found
        map_name, key, record = found  # type: ignore[misc]
        field = _TEXT_FIELDS[map_name]
        text = record[field]
        if type(text) is not Text:
            text = Text(text)
            journal = self.journal
            if journal is not None:
                journal.append((_SET, record, field, record[field]))
            record[field] = text
        self._append_text(text, event["payload"]["delta"])
        self._touch(map_name, key, record, event["timestamp"])
        return self._accept(ekey, event["runId"], event["sequence"])

    def _on_message_delta(
        self, event: Mapping[str, Any], etype: str, prefix: str, ekey: Token, run: Any
    ) -> int:
        if self.journal is None and type(event["payload"]["delta"]) is str:
            record = self.entities["messages"].get(prefix + event["payload"]["messageId"])
            if record is not None and type(record["content"]) is Text:
                return self._on_text_delta(event, etype, prefix, ekey, run)
        found = self._entity(event, etype, prefix, ekey)
        if type(found) is int:
            return found
        map_name, key, record = found  # type: ignore[misc]
        delta = event["payload"]["delta"]
        content = record["content"]
        journal = self.journal
        if type(content) is Text and type(delta) is str:
            self._append_text(content, delta)
        elif type(content) is list:
            if journal is not None:
                journal.append((_TRUNC, content, len(content)))
            if isinstance(delta, str):
                content.append({"type": "text", "text": delta})
            else:
                content.extend(delta)
        else:
            current = content.value() if type(content) is Text else content
            if isinstance(current, str) and isinstance(delta, str):
                replacement: Any = Text(current)
                replacement.chunks.append(delta)
            else:
                parts = [{"type": "text", "text": current}] if isinstance(current, str) else []
                replacement = parts + (
                    [{"type": "text", "text": delta}] if isinstance(delta, str) else list(delta)
                )
            if journal is not None:
                journal.append((_SET, record, "content", content))
            record["content"] = replacement
            self._streams.clear()  # the cached Text is no longer the content
        self._touch(map_name, key, record, event["timestamp"])
        return self._accept(ekey, event["runId"], event["sequence"])


_Handler = Callable[[Engine, Mapping[str, Any], str, str, Token, Any], int]


def _handler_table() -> dict[str, _Handler]:
    """Event type -> Engine method, as plain functions shared by every Engine.

    One table for the class, not bound methods per instance: those made each Engine a
    reference cycle (30 bound methods pointing back at it), so a store that went away stayed
    for the collector, and every retained conversation kept 30 more objects for each full
    collection to walk.
    """
    table: dict[str, _Handler] = {}
    for etype in EVENT_ENTITY_KIND:
        if etype in START_TYPES:
            table[etype] = Engine._on_start
        elif etype == "message.delta":
            table[etype] = Engine._on_message_delta
        elif etype in ("reasoning.delta", "tool.arguments_delta"):
            table[etype] = Engine._on_text_delta
        else:
            table[etype] = Engine._on_follow_up
    table["session.started"] = Engine._on_session_started
    table["run.started"] = Engine._on_run_started
    for etype in _RUN_TERMINAL_FIELD:
        table[etype] = Engine._on_run_terminal
    return table


_HANDLERS: Final = _handler_table()
