"""Hypothesis strategies: random streams of AgentEvents, valid and invalid."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], odds: int = 7) -> Any:
    """``common`` about ``odds`` times out of ``odds + 1``, else ``rare``.

    (``st.one_of`` de-duplicates repeated strategies, so it cannot weight.)
    """
    return st.integers(0, odds).flatmap(lambda n: rare if n == 0 else common)


IDS = st.sampled_from(["a", "b"])
TEXT = st.sampled_from(["", "x", "yz", "😀", "\u2028"])
OPT_TEXT = mostly(TEXT, st.none())  # None is invalid where a string is optional
JSONISH = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), TEXT, st.lists(st.integers(0, 2), max_size=2)
)
PART = st.sampled_from(
    [
        {"type": "text", "text": "p"},
        {"type": "image", "url": "u"},
        {"type": "file", "name": "f", "data": None},
        {"type": "ns.part", "data": {"k": 1}},
        {"type": "nodot", "data": 1},  # invalid
    ]
)
CONTENT = mostly(TEXT, st.lists(PART, max_size=2), odds=2)
ERROR = mostly(
    st.fixed_dictionaries(
        {"message": st.sampled_from(["boom", "boom", "boom", ""])},
        optional={"code": OPT_TEXT, "retryable": st.booleans()},
    ),
    st.just("not-an-error"),
)
NUMBER = mostly(
    st.one_of(st.integers(1, 100), st.just(3.0)),
    st.one_of(st.integers(-2, 0), st.just(2.5), st.just(float("inf")), st.booleans()),
    odds=5,
)


def _payload(required: dict[str, Any], **optional: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional)


def _id(name: str) -> dict[str, Any]:
    return {name: IDS}


PAYLOADS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "session.started": _payload({}, title=OPT_TEXT),
    "run.started": _payload({}, input=JSONISH),
    "run.completed": _payload(
        {}, output=JSONISH, usage=st.dictionaries(st.sampled_from(["in", "out"]), NUMBER)
    ),
    "run.failed": _payload({"error": ERROR}),
    "run.cancelled": _payload({}, reason=OPT_TEXT),
    "message.started": _payload(
        {"messageId": IDS, "role": st.sampled_from(["assistant", "user", "assistant", ""])},
        content=CONTENT,
    ),
    "message.delta": _payload({"messageId": IDS, "delta": CONTENT}),
    "message.completed": _payload(_id("messageId"), content=CONTENT),
    "message.failed": _payload({"messageId": IDS, "error": ERROR}),
    "message.cancelled": _payload(_id("messageId"), reason=OPT_TEXT),
    "reasoning.started": _payload(_id("reasoningId"), redacted=st.booleans()),
    "reasoning.delta": _payload({"reasoningId": IDS, "delta": TEXT}),
    "reasoning.completed": _payload(_id("reasoningId"), content=OPT_TEXT, summary=OPT_TEXT),
    "reasoning.failed": _payload({"reasoningId": IDS, "error": ERROR}),
    "reasoning.cancelled": _payload(_id("reasoningId"), reason=OPT_TEXT),
    "tool.requested": _payload(
        {"toolCallId": IDS, "name": st.sampled_from(["search", "search", "search", ""])},
        arguments=OPT_TEXT,
        index=NUMBER,
        attempt=NUMBER,
        retryOf=OPT_TEXT,
    ),
    "tool.arguments_delta": _payload({"toolCallId": IDS, "delta": TEXT}),
    "tool.running": _payload(_id("toolCallId")),
    "tool.completed": _payload(_id("toolCallId"), result=JSONISH),
    "tool.failed": _payload({"toolCallId": IDS, "error": ERROR}),
    "tool.cancelled": _payload(_id("toolCallId"), reason=OPT_TEXT),
    "approval.requested": _payload(
        _id("approvalId"),
        toolCallId=OPT_TEXT,
        description=OPT_TEXT,
        risk=OPT_TEXT,
        data=JSONISH,
        editable=st.booleans(),
        expiresAt=NUMBER,
        version=st.one_of(TEXT, NUMBER),
    ),
    "approval.resolved": _payload(
        {
            "approvalId": IDS,
            "decision": st.sampled_from(
                ["approved", "rejected", "modified", "expired", "approved", "no"]
            ),
        },
        data=JSONISH,
    ),
    "task.created": _payload(
        {"taskId": IDS, "title": st.sampled_from(["T", "T", "T", ""])}, description=OPT_TEXT
    ),
    "task.updated": _payload(_id("taskId"), title=OPT_TEXT, description=OPT_TEXT, progress=NUMBER),
    "task.completed": _payload(_id("taskId"), result=JSONISH),
    "task.failed": _payload({"taskId": IDS, "error": ERROR}),
    "task.cancelled": _payload(_id("taskId"), reason=OPT_TEXT),
    "artifact.created": _payload(
        {"artifactId": IDS, "name": st.sampled_from(["file", "file", "file", ""])},
        mediaType=OPT_TEXT,
        content=JSONISH,
    ),
    "artifact.updated": _payload({"artifactId": IDS, "content": JSONISH}, version=JSONISH),
    "artifact.completed": _payload(_id("artifactId"), content=JSONISH, version=JSONISH),
    "artifact.failed": _payload({"artifactId": IDS, "error": ERROR}),
}

RUNS = ["r1", "r2", "r😀"]
_STARTS = [t for t in PAYLOADS if t.endswith((".started", ".requested", ".created"))]
_RUN_ENDS = ["run.completed", "run.failed", "run.cancelled"]
#: Entity starts are frequent, run terminals rare, so streams build up real entities.
WEIGHTED_TYPES = sorted(
    [t for t in PAYLOADS for _ in range(4 if t in _STARTS else 1 if t in _RUN_ENDS else 2)]
)
SESSIONS = ["s1", "s2"]


@st.composite
def raw_event(draw: st.DrawFn) -> dict[str, Any]:
    etype = draw(st.sampled_from(WEIGHTED_TYPES))
    event: dict[str, Any] = {
        "protocolVersion": "0.1",
        "type": etype,
        "eventId": draw(mostly(st.none(), st.sampled_from(["dup1", "dup2"]), odds=6)),
        "sessionId": draw(mostly(st.just("s1"), st.just("s2"), odds=8)),
        "runId": draw(mostly(st.just("r1"), st.sampled_from(RUNS), odds=2)),
        "sequence": draw(mostly(st.none(), st.integers(0, 6), odds=8)),
        "timestamp": draw(st.integers(0, 50)),
        "payload": draw(PAYLOADS[etype]),
    }
    if draw(st.booleans()):
        event["parentId"] = draw(TEXT)
    if draw(st.integers(0, 3)) == 0:
        event["meta"] = {"provider": "p", "x-extra": draw(JSONISH)}
    return event


JUNK: st.SearchStrategy[Any] = st.sampled_from(
    [
        None,
        [],
        {},
        {"type": "run.started"},
        {"protocolVersion": "0.1", "type": "message.delta", "payload": None},
    ]
)


@st.composite
def event_streams(draw: st.DrawFn, max_size: int = 40) -> list[Any]:
    """A stream that usually starts its runs, then random events (some invalid)."""
    events: list[Any] = []
    if draw(st.integers(0, 4)) > 0:
        events.append({"type": "session.started", "runId": "r1", "sessionId": "s1", "payload": {}})
        for run_id in RUNS:
            if draw(st.integers(0, 3)) > 0:
                events.append(
                    {"type": "run.started", "runId": run_id, "sessionId": "s1", "payload": {}}
                )
        for event in events:
            event.update(protocolVersion="0.1", eventId=None, sequence=None, timestamp=0)
    body = draw(
        st.lists(mostly(raw_event(), JUNK, odds=12), min_size=max_size // 4, max_size=max_size)
    )
    events.extend(body)
    counters: dict[str, int] = {}
    stream: list[Any] = []
    for index, event in enumerate(events):
        if isinstance(event, dict) and "runId" in event and "eventId" in event:
            event = dict(event)
            run_id = event["runId"]
            if event["sequence"] is None:
                counters[run_id] = counters.get(run_id, -1) + 1
                event["sequence"] = counters[run_id]
            if event["eventId"] is None:
                event["eventId"] = f"ev{index}"
        stream.append(event)
    return stream


_FOLLOW_UPS: dict[str, list[str]] = {
    "message": ["message.delta"] * 4 + ["message.completed", "message.failed", "message.cancelled"],
    "reasoning": ["reasoning.delta"] * 3
    + ["reasoning.completed", "reasoning.failed", "reasoning.cancelled"],
    "tool": ["tool.arguments_delta"] * 3
    + ["tool.running", "tool.completed", "tool.failed", "tool.cancelled"],
    "approval": ["approval.resolved"],
    "task": ["task.updated"] * 2 + ["task.completed", "task.failed", "task.cancelled"],
    "artifact": ["artifact.updated"] * 2 + ["artifact.completed", "artifact.failed"],
}
_START_OF = {
    "message": ("message.started", "messageId"),
    "reasoning": ("reasoning.started", "reasoningId"),
    "tool": ("tool.requested", "toolCallId"),
    "approval": ("approval.requested", "approvalId"),
    "task": ("task.created", "taskId"),
    "artifact": ("artifact.created", "artifactId"),
}


@st.composite
def lifecycle_streams(draw: st.DrawFn, max_steps: int = 40) -> list[Any]:
    """Plausible streams: runs start, entities start and stream, with some noise mixed in."""
    runs = draw(st.lists(st.sampled_from(RUNS), min_size=1, max_size=3, unique=True))
    sequences: dict[str, int] = {}
    events: list[Any] = []

    def emit(etype: str, run_id: str, payload: dict[str, Any]) -> None:
        sequences[run_id] = sequences.get(run_id, -1) + 1
        event: dict[str, Any] = {
            "protocolVersion": "0.1",
            "type": etype,
            "eventId": f"{run_id}:{sequences[run_id]}",
            "sessionId": "s1",
            "runId": run_id,
            "sequence": sequences[run_id],
            "timestamp": len(events),
            "payload": payload,
        }
        if draw(st.integers(0, 5)) == 0:
            event["meta"] = {"k": len(events)}
        events.append(event)

    emit("session.started", runs[0], {"title": "t"})
    for run_id in runs:
        emit("run.started", run_id, {"input": run_id})
    started: list[tuple[str, str, str]] = []
    for _ in range(draw(st.integers(5, max_steps))):
        action = draw(st.integers(0, 11))
        if action <= 2 or not started:
            kind = draw(st.sampled_from(sorted(_START_OF)))
            etype, id_field = _START_OF[kind]
            run_id = draw(st.sampled_from(runs))
            entity_id = draw(st.sampled_from(["a", "b", "c"]))
            emit(etype, run_id, {**draw(PAYLOADS[etype]), id_field: entity_id})
            started.append((kind, run_id, entity_id))
        elif action <= 8:
            kind, run_id, entity_id = draw(st.sampled_from(started))
            etype = draw(st.sampled_from(_FOLLOW_UPS[kind]))
            emit(etype, run_id, {**draw(PAYLOADS[etype]), _START_OF[kind][1]: entity_id})
        elif action == 9:
            noise = draw(raw_event())
            noise["sequence"] = sequences.get(noise["runId"], -1) + 1
            sequences[noise["runId"]] = noise["sequence"]
            noise["eventId"] = f"noise{len(events)}"
            events.append(noise)
        elif action == 10 and events:
            events.append(draw(st.sampled_from(events)))  # a duplicate
        elif draw(st.integers(0, 2)) == 0:
            run_id = draw(st.sampled_from(runs))
            etype = draw(st.sampled_from(["run.completed", "run.failed", "run.cancelled"]))
            emit(etype, run_id, draw(PAYLOADS[etype]))
    return events


def any_streams(max_size: int = 40) -> st.SearchStrategy[list[Any]]:
    return st.one_of(event_streams(max_size=max_size), lifecycle_streams(max_steps=max_size))


_DELTA_OF = {
    "message": ("message.delta", "messageId"),
    "reasoning": ("reasoning.delta", "reasoningId"),
    "tool": ("tool.arguments_delta", "toolCallId"),
}
_ENDS_OF = {
    "message": ["message.completed", "message.failed", "message.cancelled"],
    "reasoning": ["reasoning.completed", "reasoning.failed", "reasoning.cancelled"],
    "tool": ["tool.running", "tool.completed", "tool.failed", "tool.cancelled"],
}


@st.composite
def delta_streams(draw: st.DrawFn, max_steps: int = 40) -> list[Any]:
    """Streams of text deltas with factory-shaped event ids (``{runId}:{sequence}:{type}``), the
    engine's hot path, broken up by everything that must take it off that path: interleaved
    entities and kinds, starts and ends, duplicates, stale and far-off sequences, another
    session, unknown entities, non-factory ids, float sequences, list deltas, run terminals."""
    runs = draw(st.lists(st.sampled_from(RUNS), min_size=1, max_size=2, unique=True))
    sequences: dict[str, int] = {}
    events: list[Any] = []

    def emit(etype: str, run_id: str, payload: dict[str, Any], **envelope: Any) -> None:
        sequence = envelope.pop("sequence", None)
        if sequence is None:
            sequence = sequences[run_id] = sequences.get(run_id, -1) + 1
        event: dict[str, Any] = {
            "protocolVersion": "0.1",
            "type": etype,
            "eventId": f"{run_id}:{sequence}:{etype}",
            "sessionId": "s1",
            "runId": run_id,
            "sequence": sequence,
            "timestamp": len(events),
            "payload": payload,
        }
        event.update(envelope)
        events.append(event)

    opened: list[tuple[str, str, str]] = []

    def start(kind: str, run_id: str, entity_id: str) -> None:
        opened.append((kind, run_id, entity_id))
        etype, id_field = _START_OF[kind]
        emit(etype, run_id, {**draw(PAYLOADS[etype]), id_field: entity_id})

    emit("session.started", runs[0], {"title": "t"})
    for run_id in runs:
        emit("run.started", run_id, {})
        for kind in sorted(_DELTA_OF):  # valid starts (extra payload keys are allowed)
            etype, id_field = _START_OF[kind]
            emit(etype, run_id, {id_field: "a", "role": "assistant", "name": "search"})
            opened.append((kind, run_id, "a"))
    for _ in range(draw(st.integers(5, max_steps))):
        action = draw(st.integers(0, 30))
        kind = draw(st.sampled_from(sorted(_DELTA_OF)))
        run_id = draw(st.sampled_from(runs))
        entity_id = draw(mostly(st.sampled_from(["a", "a", "b"]), st.just("zz"), odds=12))
        etype, id_field = _DELTA_OF[kind]
        if action <= 12 or action > 24:  # a burst of deltas, mostly into an entity started before
            if opened and draw(st.integers(0, 4)) > 0:
                kind, run_id, entity_id = draw(st.sampled_from(opened))
                etype, id_field = _DELTA_OF[kind]
            for _ in range(draw(st.integers(1, 8))):
                emit(etype, run_id, {id_field: entity_id, "delta": draw(TEXT)})
        elif action <= 14:
            start(kind, run_id, entity_id)
        elif action == 15:
            end = draw(st.sampled_from(_ENDS_OF[kind]))
            emit(end, run_id, {**draw(PAYLOADS[end]), id_field: entity_id})
        elif action == 16 and events:
            events.append(draw(st.sampled_from(events)))  # a duplicate
        elif action == 17:  # a stale or repeated sequence, new type or payload
            stale = max(sequences.get(run_id, 0) - draw(st.integers(0, 2)), 0)
            emit(etype, run_id, {id_field: entity_id, "delta": draw(TEXT)}, sequence=stale)
        elif action == 18:  # a gap, sometimes beyond what the compact ids hold
            sequences[run_id] = sequences.get(run_id, 0) + draw(st.sampled_from([1, 2, 70, 500]))
            emit(etype, run_id, {id_field: entity_id, "delta": draw(TEXT)})
        elif action == 19:
            emit(etype, run_id, {id_field: entity_id, "delta": "s2"}, sessionId="s2")
        elif action == 20:  # not a factory-shaped id, or a float sequence
            sequence = sequences[run_id] = sequences.get(run_id, -1) + 1
            odd = draw(st.sampled_from(["id", "float"]))
            emit(
                etype,
                run_id,
                {id_field: entity_id, "delta": draw(TEXT)},
                sequence=sequence if odd == "id" else float(sequence),
                eventId=f"x{sequence}" if odd == "id" else f"{run_id}:{sequence}.0:{etype}",
            )
        elif action == 21:  # a message delta that turns the content into parts
            emit("message.delta", run_id, {"messageId": entity_id, "delta": [PART_TEXT]})
        elif action == 22:
            end = draw(st.sampled_from(["run.completed", "run.failed", "run.cancelled"]))
            emit(end, run_id, draw(PAYLOADS[end]))
        elif action == 23:
            emit("run.started", run_id, {})
        elif action == 24:
            noise = draw(raw_event())
            noise["sequence"] = sequences[noise["runId"]] = sequences.get(noise["runId"], -1) + 1
            noise["eventId"] = f"{noise['runId']}:{noise['sequence']}:{noise['type']}"
            events.append(noise)
    return events


PART_TEXT = {"type": "text", "text": "p"}


#: Every key of an AgentEvent envelope (protocol.md §2), for tests that mutate events.
ENVELOPE_KEYS: tuple[str, ...] = (
    "protocolVersion",
    "type",
    "eventId",
    "sessionId",
    "runId",
    "sequence",
    "timestamp",
    "payload",
    "parentId",
    "meta",
)
