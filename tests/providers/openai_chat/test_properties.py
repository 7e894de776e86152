"""Property tests of the openai-chat mapping: however a stream splits its deltas, the state
gets the same text, reasoning and tool arguments; interleaved tool calls stay apart by index."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.openai_chat import OpenAIChatProvider
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.replay_helpers import assistant_texts, reasoning_texts, tool_calls

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if text[a:b]]


def chunk(choice: dict[str, Any]) -> str:
    return orjson.dumps({"id": "x", "choices": [choice]}).decode()


async def run(datas: list[str]) -> list[dict[str, Any]]:
    provider = OpenAIChatProvider()
    provider.transport = IterableTransport(lambda _r, _s: list(datas), kind="sse")
    events = await run_collect(
        provider, {"prompt": "p"}, options=make_options(wait_timeout_seconds=0.01)
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


@settings(max_examples=40, deadline=None)
@given(
    reasoning=TEXT,
    text=TEXT,
    args_a=st.dictionaries(st.text(max_size=5), st.integers(-(2**53), 2**53), max_size=3),
    args_b=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
    interleave=st.booleans(),
)
async def test_any_split_gives_the_same_state(
    reasoning: str,
    text: str,
    args_a: dict[str, int],
    args_b: dict[str, str],
    cuts: list[int],
    interleave: bool,
) -> None:
    datas = [
        chunk({"index": 0, "delta": {"role": "assistant", "content": "", "reasoning_content": ""}})
    ]
    datas += [
        chunk({"index": 0, "delta": {"reasoning_content": p}}) for p in split(reasoning, cuts)
    ]
    datas += [chunk({"index": 0, "delta": {"content": p}}) for p in split(text, cuts)]
    raw_a, raw_b = orjson.dumps(args_a).decode(), orjson.dumps(args_b).decode()
    pieces_a, pieces_b = split(raw_a, cuts), split(raw_b, cuts)
    calls: list[dict[str, Any]] = [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "fa", "arguments": ""}},
        {"index": 1, "id": "b", "type": "function", "function": {"name": "fb", "arguments": ""}},
    ]
    frags_a = [{"index": 0, "function": {"name": "", "arguments": p}} for p in pieces_a]
    frags_b = [{"index": 1, "function": {"arguments": p}} for p in pieces_b]
    if interleave:
        order = [calls[0], calls[1]]
        longest = max(len(frags_a), len(frags_b))
        for i in range(longest):
            order += frags_a[i : i + 1] + frags_b[i : i + 1]
    else:
        order = [calls[0], *frags_a, calls[1], *frags_b]
    datas += [chunk({"index": 0, "delta": {"tool_calls": [call]}}) for call in order]
    datas += [chunk({"index": 0, "delta": {}, "finish_reason": "tool_calls"}), "[DONE]"]
    events = await run(datas)
    assert assistant_texts(events) == ([text] if text else [])
    assert reasoning_texts(events) == ([reasoning] if reasoning else [])
    got = [(name, args) for name, args, _ in tool_calls(events)]
    assert got == [("fa", args_a), ("fb", args_b)]
