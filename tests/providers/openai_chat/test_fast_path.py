"""The openai-chat streamed-text fast path (``apply_data``) against the general path
(``apply_chunk(decode_chunk(...))``): the same events, the same errors, for any stream."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.context import RunContext
from providers.contract import AgentEvent
from providers.openai_chat import OpenAIChatProvider
from providers.openai_chat.chunks import decode_chunk, streamed_text
from providers.openai_chat.mapping import apply_chunk
from providers.openai_chat.provider import _chunk_data
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport


class GeneralPathProvider(OpenAIChatProvider):
    """Every chunk through the general decoder and mapping (the path before the fast one)."""

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        apply_chunk(self.model_run(ctx).call, ctx, decode_chunk(_chunk_data(chunk)))


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
INDEX = st.sampled_from([0, 0, 0, 1, 2, "0", None])
FINISH = st.sampled_from(["stop", "length", "tool_calls", "content_filter", "", None])
ROLE = st.sampled_from(["assistant", "user", None])


@st.composite
def deltas(draw: st.DrawFn) -> dict[str, Any]:
    """One choice's ``delta``: mostly streamed text, else any mix of the other fields."""
    shape = draw(
        st.sampled_from(
            ["text", "text", "text", "role", "reasoning", "refusal", "tool", "mistral", "mix"]
        )
    )
    if shape == "text":
        return {"content": draw(TEXT)}
    if shape == "role":
        return {"role": draw(ROLE), "content": draw(st.one_of(TEXT, st.none()))}
    if shape == "reasoning":
        key = draw(st.sampled_from(["reasoning_content", "reasoning"]))
        return {key: draw(TEXT)}
    if shape == "refusal":
        return {"refusal": draw(TEXT)}
    if shape == "tool":
        call: dict[str, Any] = {"index": draw(st.sampled_from([0, 1, None]))}
        if draw(st.booleans()):
            call["id"] = draw(st.sampled_from(["call_a", "call_b", ""]))
        function: dict[str, Any] = {"arguments": draw(st.sampled_from(["", "{", '"a"', ":1}"]))}
        if draw(st.booleans()):
            function["name"] = draw(st.sampled_from(["fa", "fb", ""]))
        call["function"] = function
        return {"tool_calls": [call]}
    if shape == "mistral":
        return {
            "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": draw(TEXT)}]},
                {"type": "text", "text": draw(TEXT)},
            ]
        }
    mixed: dict[str, Any] = {"content": draw(st.one_of(TEXT, st.none(), st.integers(-5, 5)))}
    for key in draw(st.sets(st.sampled_from(["reasoning_content", "refusal", "role", "extra"]))):
        mixed[key] = draw(TEXT)
    return mixed


@st.composite
def choices(draw: st.DrawFn) -> Any:
    choice: dict[str, Any] = {"index": draw(INDEX), "delta": draw(deltas())}
    if draw(st.integers(0, 4)) == 0:
        choice["finish_reason"] = draw(FINISH)
    if draw(st.integers(0, 9)) == 0:
        choice["delta"] = draw(st.sampled_from([None, "x", []]))
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(["not a choice", 3, None]))
    return choice


@st.composite
def chunks(draw: st.DrawFn) -> str:
    """One SSE ``data`` payload of a Chat Completions stream (or of a broken one)."""
    kind = draw(st.integers(0, 39))
    if kind == 0:
        return "[DONE]"
    if kind == 1:
        return draw(st.sampled_from(['{"choices": [', "[1, 2]", '"text"']))
    payload: dict[str, Any] = {}
    if draw(st.booleans()):
        payload["id"] = draw(st.sampled_from(["chatcmpl-1", "chatcmpl-2", "", 7]))
    if draw(st.booleans()):
        payload["model"] = draw(st.sampled_from(["m1", "m2", ""]))
    count = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    payload["choices"] = draw(st.lists(choices(), min_size=count, max_size=count))
    extra = draw(st.integers(0, 14))
    if extra == 0:
        payload["usage"] = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    elif extra == 1:
        payload["usage"] = None
    elif extra == 2:
        payload["x_groq"] = draw(st.sampled_from([{"usage": {"prompt_tokens": 1}}, {}, None]))
    elif extra == 3:
        payload["error"] = draw(st.sampled_from([{"message": "boom", "code": "x"}, "", None]))
    elif extra == 4:
        payload["choices"] = draw(st.sampled_from([None, {}, "x"]))
    return orjson.dumps(payload).decode()


def _finish(index: int = 0, reason: str = "stop") -> str:
    return orjson.dumps(
        {"choices": [{"index": index, "delta": {}, "finish_reason": reason}]}
    ).decode()


async def _events(provider: OpenAIChatProvider, datas: list[str]) -> list[AgentEvent]:
    provider.transport = IterableTransport(lambda _r, _s: list(datas), kind="sse")
    options = make_options(wait_timeout_seconds=0.01)
    return await run_collect(provider, {"prompt": "p"}, options=options)


@settings(max_examples=150, deadline=None)
@given(datas=st.lists(chunks(), max_size=14), finish=st.booleans())
async def test_generated_streams_give_the_same_events_on_both_paths(
    datas: list[str], finish: bool
) -> None:
    if finish:
        datas = [*datas, _finish(), "[DONE]"]
    fast = await _events(OpenAIChatProvider(), datas)
    general = await _events(GeneralPathProvider(), datas)
    assert fast == general


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(TEXT, min_size=1, max_size=20),
    role_first=st.booleans(),
    usage_null=st.booleans(),
    reasoning=st.lists(TEXT, max_size=3),
)
async def test_a_split_answer_gives_the_same_events_on_both_paths(
    pieces: list[str], role_first: bool, usage_null: bool, reasoning: list[str]
) -> None:
    """The shape the fast path exists for: reasoning, then the answer split over many chunks."""
    extra: dict[str, Any] = {"usage": None} if usage_null else {}

    def data(delta: dict[str, Any]) -> str:
        body = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}], **extra}
        return orjson.dumps(body).decode()

    datas = [data({"reasoning_content": text}) for text in reasoning]
    if role_first:
        datas.append(data({"role": "assistant", "content": ""}))
    datas += [data({"content": text}) for text in pieces]
    datas += [_finish(), "[DONE]"]
    fast = await _events(OpenAIChatProvider(), datas)
    assert fast == await _events(GeneralPathProvider(), datas)
    text = "".join(e["payload"]["delta"] for e in fast if e["type"] == "message.delta")
    assert text == "".join(pieces)
    assert fast[-1]["type"] == "run.completed"


SEGMENT_KEYS = {"text": "content", "reasoning": "reasoning_content", "refusal": "refusal"}


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(sorted(SEGMENT_KEYS)), st.sampled_from([0, 0, 1]), TEXT),
        min_size=1,
        max_size=16,
    )
)
async def test_interleaved_text_reasoning_and_refusal_give_the_same_events(
    steps: list[tuple[str, int, str]],
) -> None:
    """Text after reasoning (or a refusal) of the same or another choice: the transitions the
    fast path must leave to the general one (closing the reasoning, opening the message)."""
    datas = [
        orjson.dumps({"choices": [{"index": index, "delta": {SEGMENT_KEYS[kind]: text}}]}).decode()
        for kind, index, text in steps
    ]
    datas += [_finish(0), _finish(1), "[DONE]"]
    fast = await _events(OpenAIChatProvider(), datas)
    assert fast == await _events(GeneralPathProvider(), datas)


async def test_text_after_reasoning_within_an_open_message_closes_the_reasoning() -> None:
    datas = [
        orjson.dumps({"choices": [{"index": 0, "delta": delta}]}).decode()
        for delta in ({"content": "a"}, {"reasoning": "r"}, {"content": "b"})
    ]
    datas += [_finish(), "[DONE]"]
    fast = await _events(OpenAIChatProvider(), datas)
    assert fast == await _events(GeneralPathProvider(), datas)
    types = [e["type"] for e in fast]
    closed = types.index("reasoning.completed")
    assert types[closed + 1] == "message.delta"
    assert fast[closed + 1]["payload"]["delta"] == "b"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"choices": [{"index": 0, "delta": {"content": "hi"}}]}, (0, "hi")),
        ({"choices": [{"index": 2, "delta": {"role": "assistant", "content": ""}}]}, (2, "")),
        ({"choices": [{"index": "1", "delta": {"content": "x"}}]}, (0, "x")),
        (
            {"usage": None, "choices": [{"delta": {"content": "x"}, "finish_reason": None}]},
            (0, "x"),
        ),
        ({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}, None),
        ({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": ""}]}, None),
        ({"choices": [{"index": 0, "delta": {"content": "x", "refusal": "no"}}]}, None),
        ({"choices": [{"index": 0, "delta": {"reasoning": "r"}}]}, None),
        ({"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "x"}]}}]}, None),
        ({"choices": [{"index": 0, "delta": {"content": None}}]}, None),
        ({"choices": [{"delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}, None),
        ({"choices": []}, None),
        (
            {"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"total_tokens": 1}},
            None,
        ),
        ({"choices": [{"index": 0, "delta": {"content": "x"}}], "x_groq": {"usage": {}}}, None),
        ({"choices": [{"index": 0, "delta": {"content": "x"}}], "error": {"message": "e"}}, None),
        ({"choices": ["x"]}, None),
    ],
)
def test_streamed_text_takes_only_the_plain_text_chunk(
    payload: dict[str, Any], expected: tuple[int, str] | None
) -> None:
    assert streamed_text(payload) == expected
