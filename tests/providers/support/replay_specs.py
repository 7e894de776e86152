"""How each provider's recorded streams are replayed (fixtures README rules), and what each
recording's case in ``replay_cases.py`` asserts, per provider.

Tool-call recordings are complete model turns that end in a hand-off to the app: the replay
submits each tool's result and answers the continuation request with a short synthetic text
turn, so every run ends with its expected terminal and zero contract issues. Recordings that
concatenate the responses of one tool loop (``anthropic-tool-search-deferred-bm25``,
``openai-reasoning-encrypted-content``) are split at each response's start and replayed as
successive upstream turns of one run. The ``openai-responses`` error recording (``error`` then
``response.failed``) ends the run ``run.failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.anthropic_messages import AnthropicMessagesProvider
from providers.contract import AgentEvent, AgentProvider
from providers.openai_chat import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from providers.recorded import load_recorded_stream, split_turns
from providers.testing import assert_provider_contract, make_options
from tests.providers.support.mock_upstreams import (
    Frames,
    anthropic_frames,
    openai_frames,
    responses_frames,
)
from tests.providers.support.replay_cases import (
    ANTHROPIC,
    ANTHROPIC_CASES,
    OPENAI_CHAT,
    OPENAI_CHAT_CASES,
    OPENAI_RESPONSES,
    OPENAI_RESPONSES_CASES,
    OPENAI_RESPONSES_CONCATENATED,
)
from tests.providers.support.replay_helpers import (
    assistant_texts,
    frames_to_chunks,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)


@dataclass(frozen=True)
class ReplaySpec:
    """One provider's recordings: where, how they are cut into turns, and their case checks."""

    provider: Callable[[], AgentProvider]
    directory: Path
    wire: str
    cases: dict[str, Any]
    done_frames: Callable[[], Frames]
    concatenated: tuple[str, ...]
    response_start: str
    tool_results: int
    check: Callable[[list[AgentEvent], Any], None]

    def turns_of(self, name: str) -> list[list[Any]]:
        chunks = load_recorded_stream(self.directory / name, self.wire)
        if name in self.concatenated:
            return split_turns(chunks, lambda chunk: chunk.event == self.response_start)
        return [chunks, frames_to_chunks(self.done_frames())]

    def fails(self, name: str) -> bool:
        return self.wire == "openai-responses" and self.cases[name][3] is None


async def replay(
    spec: ReplaySpec, name: str, transcript: dict[str, Any] | None = None
) -> list[AgentEvent]:
    """Replay one recording through its provider under the provider contract's checks."""
    return await assert_provider_contract(
        spec.provider(),
        turns=spec.turns_of(name),
        options=make_options(
            wait_timeout_seconds=5, transcript=transcript if transcript is not None else {}
        ),
        commands=[submit_next_tool({"ok": True}) for _ in range(spec.tool_results)],
        expect_terminal="run.failed" if spec.fails(name) else "run.completed",
    )


def check_openai_chat(events: list[AgentEvent], case: Any) -> None:
    text, tools, reasoning, stop = case
    texts = assistant_texts(events)
    if text is not None:
        assert isinstance(texts[0], str) and texts[0].startswith(text)
    assert [(n, a) for n, a, _ in tool_calls(events)] == tools
    assert all(status == "completed" for _, _, status in tool_calls(events))
    if tools:
        assert texts[-1] == "Done."  # the continuation after the tool results
        for event in events:
            if event["type"] == "tool.requested":
                assert event["meta"]["executor"] == "app"
    rsn = reasoning_texts(events)
    if reasoning is None:
        assert rsn == []
    else:
        assert len(rsn) == 1 and rsn[0].startswith(reasoning)
    done = terminal(events)
    assert done["payload"]["output"]["stopReason"] == stop
    assert done["payload"]["usage"]["inputTokens"] > 0


def check_anthropic(events: list[AgentEvent], case: Any) -> None:
    text, tools, reasoning, stop = case
    texts = assistant_texts(events)
    if text is not None:
        assert isinstance(texts[0], str) and texts[0].startswith(text)
    else:
        assert texts in ([], ["Done."])
    got = tool_calls(events)
    assert [(n, s) for n, _, s in got] == [(n, s) for n, _, s in tools]
    for (_, args, _), (_, want, _) in zip(got, tools, strict=True):
        if want is not None:
            assert args == want
    assert [
        r[: len(p)] for r, p in zip(reasoning_texts(events), reasoning, strict=True)
    ] == reasoning
    assert terminal(events)["payload"]["output"]["stopReason"] == stop


def check_openai_responses(events: list[AgentEvent], case: Any) -> None:
    text, tools, reasoning, stop = case
    texts = assistant_texts(events)
    if text is not None:
        assert isinstance(texts[0], str) and texts[0].startswith(text)
    else:
        assert texts in ([], ["Done."])
    assert tool_calls(events) == tools
    for event in events:
        if event["type"] == "tool.requested":
            assert event["meta"]["executor"] == "app"
    assert [r[: len(p)] for r, p in zip(reasoning_texts(events), reasoning, strict=True)] == (
        reasoning
    )
    if stop is not None:
        done = terminal(events)
        assert done["payload"]["output"]["stopReason"] == stop
        assert done["payload"]["usage"]["totalTokens"] >= 0  # synthetic mocks report zeros


OPENAI_CHAT_SPEC = ReplaySpec(
    provider=OpenAIChatProvider,
    directory=OPENAI_CHAT,
    wire="openai-chat",
    cases=OPENAI_CHAT_CASES,
    done_frames=lambda: openai_frames(text="Done."),
    concatenated=(),
    response_start="",
    tool_results=2,
    check=check_openai_chat,
)
ANTHROPIC_SPEC = ReplaySpec(
    provider=AnthropicMessagesProvider,
    directory=ANTHROPIC,
    wire="anthropic-messages",
    cases=ANTHROPIC_CASES,
    done_frames=lambda: anthropic_frames(text="Done."),
    concatenated=("anthropic-tool-search-deferred-bm25.chunks.txt",),
    response_start="message_start",
    tool_results=2,
    check=check_anthropic,
)
OPENAI_RESPONSES_SPEC = ReplaySpec(
    provider=OpenAIResponsesProvider,
    directory=OPENAI_RESPONSES,
    wire="openai-responses",
    cases=OPENAI_RESPONSES_CASES,
    done_frames=lambda: responses_frames(text="Done."),
    concatenated=OPENAI_RESPONSES_CONCATENATED,
    response_start="response.created",
    tool_results=3,
    check=check_openai_responses,
)
SPECS = {
    "openai-chat": OPENAI_CHAT_SPEC,
    "anthropic-messages": ANTHROPIC_SPEC,
    "openai-responses": OPENAI_RESPONSES_SPEC,
}
