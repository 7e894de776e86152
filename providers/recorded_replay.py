"""Replay a recorded upstream stream through a provider of its dialect (``validate`` CLI).

The recording is loaded by the fixtures README rules (``providers.recorded``) and split into
upstream turns where it concatenates responses (Anthropic: a ``message_start`` after a
``message_stop``; OpenAI Responses: a ``response.created`` after a response terminal; AG-UI: a
``RUN_STARTED`` after a run terminal). When the run waits on the app
and another recorded turn follows, the replay answers for the app (each waiting tool gets the
result ``{"replayed": true}``, each approval is approved) so the next turn plays as the
continuation; when the recording is exhausted while the run waits, the run is cancelled.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from providers.contract import AgentEvent, AgentProvider, Command
from providers.recorded import load_jsonl_objects, load_recorded_stream, split_turns
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport

__all__ = ["DIALECT_OF_KIND", "recorded_turns", "replay_recording"]

DIALECT_OF_KIND = {
    "openai-chat": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic-messages": "anthropic-messages",
    "ag-ui": "ag-ui",
}
_RESPONSE_TERMINALS = ("response.completed", "response.incomplete", "response.failed")
REPLAYED_RESULT = {"replayed": True}
_MAX_COMMANDS = 64


def _chunk_type(chunk: Any) -> str | None:
    if isinstance(chunk, dict):
        kind = chunk.get("type")
        return kind if isinstance(kind, str) else None
    event = getattr(chunk, "event", None)
    if isinstance(event, str) and event != "message":
        return event
    data = getattr(chunk, "data", "")
    marker = '"type":'
    index = data.find(marker)
    if index < 0:
        return None
    rest = data[index + len(marker) :].lstrip().lstrip('"')
    return rest.split('"', 1)[0]


def _lines(file: Path) -> list[str]:
    return [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _json_or_text(line: str) -> Any:
    """A parsed line, or the line itself: the provider then reports the malformed payload."""
    try:
        return load_jsonl_objects(line)[0]
    except ValueError:
        return line


def recorded_turns(path: str | Path, kind: str) -> list[list[Any]]:
    """The recording of ``kind`` as a list of upstream turns (one chunk list per request)."""
    dialect = DIALECT_OF_KIND.get(kind)
    file = Path(path)
    if dialect == "ag-ui" and file.suffix in (".jsonl", ".ndjson"):
        chunks: list[Any] = [_json_or_text(line) for line in _lines(file)]
    elif dialect is not None:
        chunks = load_recorded_stream(file, dialect)
    else:
        raise ValueError(f'No recorded-stream dialect for provider kind "{kind}".')
    previous: list[str | None] = [None]

    def boundary(chunk: Any) -> bool:
        kind_now = _chunk_type(chunk)
        before, previous[0] = previous[0], kind_now
        if dialect == "anthropic-messages":
            return kind_now == "message_start" and before == "message_stop"
        if dialect == "ag-ui":
            return kind_now == "RUN_STARTED" and before in ("RUN_FINISHED", "RUN_ERROR")
        if dialect == "openai-responses":
            return kind_now == "response.created" and before in _RESPONSE_TERMINALS
        return False

    return split_turns(chunks, boundary)


def _answer(remaining: Sequence[Any]) -> Callable[[list[AgentEvent]], Command]:
    def make(events: list[AgentEvent]) -> Command:
        if not remaining:
            return Command("run.cancel", {})
        open_tools: dict[str, bool] = {}
        approvals: list[str] = []
        for event in events:
            payload = event["payload"]
            kind = event["type"]
            if kind == "tool.requested":
                open_tools[payload["toolCallId"]] = (event.get("meta") or {}).get(
                    "executor"
                ) == "app"
            elif kind in ("tool.completed", "tool.failed", "tool.cancelled"):
                open_tools.pop(payload["toolCallId"], None)
            elif kind == "approval.requested":
                approvals.append(payload["approvalId"])
            elif kind == "approval.resolved" and payload["approvalId"] in approvals:
                approvals.remove(payload["approvalId"])
        for tool_call_id, app in open_tools.items():
            if app:
                payload = {"toolCallId": tool_call_id, "result": REPLAYED_RESULT}
                return Command("tool.submit_result", payload)
        if approvals:
            return Command("approval.resolve", {"approvalId": approvals[0], "decision": "approved"})
        return Command("run.cancel", {})

    return make


async def replay_recording(
    provider: AgentProvider, path: str | Path, kind: str, input: dict[str, Any]
) -> list[AgentEvent]:
    """Run ``provider`` over the recording and return every event it emitted."""
    remaining = recorded_turns(path, kind)
    subject = copy.copy(provider)

    def source(_request: Any, _signal: Any) -> list[Any]:
        return remaining.pop(0) if remaining else []

    subject.transport = IterableTransport(source, kind=provider.transport.kind)
    answer = _answer(remaining)
    return await run_collect(
        subject,
        input,
        options=make_options(now=None, wait_timeout_seconds=30),
        commands=[answer] * _MAX_COMMANDS,
    )
