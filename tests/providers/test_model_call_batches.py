"""The model-API providers map one upstream read in one call (``transform_chunks``): the very
events of the chunk-by-chunk path, for every recorded stream and any split into reads, and a
subclass that maps chunks its own way keeps its mapping."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.anthropic_messages import AnthropicMessagesProvider
from providers.context import RunContext
from providers.contract import AgentEvent
from providers.model_calls import ModelApiProvider
from providers.openai_chat import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from providers.recorded import load_recorded_stream
from providers.testing import make_options, run_collect, sse_reads_transport
from tests.providers.openai_chat.test_fast_path import chunks as chat_chunks
from tests.providers.support.replay_helpers import FIXTURES

#: dialect -> (fixture folder, provider class)
DIALECTS: dict[str, tuple[str, type[ModelApiProvider[Any]]]] = {
    "openai-chat": ("openai-chat", OpenAIChatProvider),
    "anthropic-messages": ("anthropic", AnthropicMessagesProvider),
    "openai-responses": ("openai-responses", OpenAIResponsesProvider),
}


def recordings() -> list[tuple[str, Path]]:
    out = []
    for dialect, (folder, _) in DIALECTS.items():
        for path in sorted((FIXTURES / folder).iterdir()):
            if path.suffix in (".sse", ".bin", ".txt", ".jsonl") and path.name != "README.md":
                out.append((dialect, path))
    return out


def sse_bytes(path: Path, dialect: str) -> bytes:
    frames = []
    for event in load_recorded_stream(path, dialect):
        head = f"event: {event.event}\n" if event.event else ""
        data = "".join(f"data: {line}\n" for line in event.data.split("\n"))
        frames.append(f"{head}{data}\n")
    return "".join(frames).encode()


def split(body: bytes, cuts: Iterable[int]) -> list[bytes]:
    """``body`` cut at the given offsets: the upstream's reads."""
    points = sorted({c for c in cuts if 0 < c < len(body)})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges) if b > a]


def per_chunk(cls: type[ModelApiProvider[Any]]) -> type[ModelApiProvider[Any]]:
    """``cls`` without the read-at-once path: the runner maps chunk by chunk."""
    return type(f"PerChunk{cls.__name__}", (cls,), {"transform_chunks": None})


def counting(cls: type[ModelApiProvider[Any]]) -> type[ModelApiProvider[Any]]:
    """``cls`` counting the reads it maps at once (the path under test is really taken)."""

    def transform_chunks(self: Any, chunks: list[Any], ctx: RunContext) -> list[AgentEvent]:
        self.reads_mapped += 1
        return cls.transform_chunks(self, chunks, ctx)

    return type(f"Counting{cls.__name__}", (cls,), {"transform_chunks": transform_chunks})


async def run(provider: ModelApiProvider[Any], reads: list[bytes]) -> list[AgentEvent]:
    provider.transport = sse_reads_transport(reads)
    options = make_options(wait_timeout_seconds=0.01)
    return await run_collect(provider, {"prompt": "p"}, options=options)


async def both_paths(
    cls: type[ModelApiProvider[Any]], reads: list[bytes]
) -> tuple[list[AgentEvent], list[AgentEvent], int]:
    batched = counting(cls)("p", url="http://upstream/v1", model="m")
    batched.reads_mapped = 0  # type: ignore[attr-defined]
    events = await run(batched, reads)
    one_by_one = await run(per_chunk(cls)("p", url="http://upstream/v1", model="m"), reads)
    return events, one_by_one, batched.reads_mapped  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("dialect", "path"), recordings(), ids=[f"{d}/{p.name}" for d, p in recordings()]
)
async def test_recorded_streams_give_the_same_events_read_at_once(dialect: str, path: Path) -> None:
    cls = DIALECTS[dialect][1]
    body = sse_bytes(path, dialect)
    rng = random.Random(path.name)
    splits = {
        "one read": [body],
        "many frames per read": split(body, range(0, len(body), 700)),
        "random cuts": split(body, rng.sample(range(len(body)), min(len(body) - 1, 40))),
    }
    for how, reads in splits.items():
        events, expected, mapped = await both_paths(cls, reads)
        assert events == expected, how
        assert mapped > 0, how
        assert any(e["type"].startswith("run.") and e["type"] != "run.started" for e in events)


@settings(max_examples=120, deadline=None)
@given(
    datas=st.lists(chat_chunks(), max_size=20),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    finish=st.booleans(),
)
async def test_generated_chat_streams_give_the_same_events_for_any_reads(
    datas: list[str], cuts: list[int], finish: bool
) -> None:
    frames = [*datas, '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'][
        : len(datas) + finish
    ]
    body = "".join(f"data: {data}\n\n" for data in frames).encode()
    events, expected, _ = await both_paths(OpenAIChatProvider, split(body, cuts))
    assert events == expected


class ShoutingChat(OpenAIChatProvider):
    """Maps chunks its own way: every streamed text in capitals."""

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        payload = orjson.loads(chunk.data) if chunk.data.startswith("{") else None
        if payload and payload.get("choices") and "content" in payload["choices"][0]["delta"]:
            delta = payload["choices"][0]["delta"]
            delta["content"] = str(delta["content"]).upper()
            chunk = orjson.dumps(payload).decode()
        super().handle_chunk(chunk, ctx)


class DroppingChat(OpenAIChatProvider):
    """Overrides ``transform_chunk`` itself: it drops every ``message.delta``."""

    def transform_chunk(self, chunk: Any, ctx: RunContext) -> list[AgentEvent]:
        return [e for e in super().transform_chunk(chunk, ctx) if e["type"] != "message.delta"]


def _answer(*texts: str) -> list[bytes]:
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    frames = [first] + [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return [b"".join(b"data: %s\n\n" % orjson.dumps(f) for f in frames) + b"data: [DONE]\n\n"]


async def test_a_subclass_mapping_chunks_its_own_way_keeps_its_mapping() -> None:
    reads = _answer("hello ", "world")
    shouted = await run(ShoutingChat("p", url="http://upstream/v1", model="m"), reads)
    deltas = [e["payload"]["delta"] for e in shouted if e["type"] == "message.delta"]
    assert deltas == ["HELLO ", "WORLD"]
    dropped = await run(DroppingChat("p", url="http://upstream/v1", model="m"), reads)
    types = [e["type"] for e in dropped]
    assert "message.delta" not in types
    assert types[-1] == "run.completed"
