"""Transports in isolation: SSE parsing and limits, replay, async-iterable abort, error mapping."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import zlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import providers
import providers.transports
from providers.errors import (
    AbortError,
    UpstreamConnectError,
    UpstreamDropped,
    UpstreamEventTooLarge,
    UpstreamHTTPError,
    UpstreamIdleTimeout,
    UpstreamMalformedChunk,
    map_transport_errors,
    to_agent_error,
)
from providers.signal import AbortSignal
from providers.testing import ByteReads
from providers.transports import (
    IterableTransport,
    ReplayTransport,
    SSEParser,
    SSETransport,
    UpstreamRequest,
)


def test_sse_parser_handles_crlf_comments_and_multiline() -> None:
    parser = SSEParser(1024)
    events = parser.feed(": ping\r\nevent: delta\r\ndata: a\r\ndata: b\r\n\r\nda")
    events += parser.feed("ta: tail\n\n")
    events += parser.close()
    assert [(e.event, e.data) for e in events] == [("delta", "a\nb"), ("message", "tail")]


def test_sse_parser_bounds_event_size() -> None:
    parser = SSEParser(16)
    with pytest.raises(UpstreamEventTooLarge):
        parser.feed("data: " + "x" * 40)  # an unterminated line growing past the limit
    parser = SSEParser(16)
    with pytest.raises(UpstreamEventTooLarge):
        parser.feed("data: 0123456789\ndata: 0123456789\n")  # lines of one event add up


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("data: a\n\ndata: b\n\ndata: " + "x" * 40 + "\n\n", UpstreamEventTooLarge),
        ("data: a\n\ndata: b\n\ndata: " + "x" * 40, UpstreamEventTooLarge),  # unterminated
        ("data: a\n\ndata: b\n\nother: v\n\n", UpstreamMalformedChunk),  # strict fields
    ],
)
def test_sse_parser_keeps_the_events_a_failing_read_completed_first(
    text: str, error: type[Exception]
) -> None:
    parser = SSEParser(16, strict_fields=True)
    with pytest.raises(error):
        parser.feed(text)
    assert [e.data for e in parser.parsed_before_error] == ["a", "b"]


async def test_sse_transport_yields_the_events_read_before_an_oversized_one() -> None:
    """One read holds two events and then one over the limit: the two come out, then the
    error (a read now carries every chunk that arrived: they must not be lost with it)."""
    reads = [b"data: a\n\ndata: b\n\ndata: " + b"x" * 40 + b"\n\n"]

    def handler(request: httpx.Request) -> httpx.Response:
        return _response(reads, "text/event-stream")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        transport = SSETransport(client=client)
        request = UpstreamRequest("http://up/x", json={}, max_event_bytes=16)
        got: list[str] = []
        with pytest.raises(UpstreamEventTooLarge):
            async for event in transport.open(request, AbortSignal()):
                got.append(event.data)
    assert got == ["a", "b"]


def test_upstream_request_repr_hides_headers() -> None:
    request = UpstreamRequest("http://x", headers={"authorization": "Bearer sk-secret"})
    assert "sk-secret" not in repr(request)


async def test_replay_transport_sse_text_and_jsonl() -> None:
    signal = AbortSignal()
    sse = ReplayTransport(text='data: {"a":1}\n\ndata: [DONE]\n\n', fmt="sse")
    assert [e.data for e in [c async for c in sse.open(None, signal)]] == ['{"a":1}', "[DONE]"]
    jsonl = ReplayTransport(text='{"a":1}\n\n[2]\n', fmt="jsonl")
    assert [c async for c in jsonl.open(None, signal)] == [{"a": 1}, [2]]


async def test_iterable_transport_abort_wakes_a_blocked_source() -> None:
    signal = AbortSignal()
    closed = asyncio.Event()

    async def source() -> AsyncIterator[int]:
        try:
            yield 1
            await asyncio.sleep(3600)
            yield 2  # pragma: no cover
        finally:
            closed.set()

    transport = IterableTransport(source())
    seen: list[int] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for chunk in transport.open(None, signal):
            seen.append(chunk)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)  # the source now blocks before its second chunk
    signal.abort("shutdown")
    with pytest.raises(AbortError) as caught:
        await asyncio.wait_for(task, 2)
    assert caught.value.reason == "shutdown"
    assert seen == [1]
    assert closed.is_set()


async def test_sse_transport_maps_status_and_body_with_mock_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer k"
        return httpx.Response(503, json={"error": "overloaded"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    transport = SSETransport(client=client)
    request = UpstreamRequest("http://up/x", json={}, headers={"authorization": "Bearer k"})
    with pytest.raises(UpstreamHTTPError) as caught:
        async for _ in transport.open(request, AbortSignal()):
            pass  # pragma: no cover
    error = caught.value.to_agent_error()
    assert error["details"] == {"status": 503, "body": '{"error":"overloaded"}'}
    assert error["retryable"] is True
    await transport.aclose()
    await client.aclose()


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (httpx.ConnectError("x"), UpstreamConnectError),
        (httpx.ReadTimeout("x"), UpstreamIdleTimeout),
        (httpx.RemoteProtocolError("x"), UpstreamDropped),
        (ConnectionRefusedError(), UpstreamConnectError),
    ],
)
def test_map_transport_errors(raised: Exception, expected: type[Exception]) -> None:
    with pytest.raises(expected), map_transport_errors():
        raise raised


def test_errors_after_abort_become_abort() -> None:
    signal = AbortSignal()
    signal.abort("interrupted")
    with pytest.raises(AbortError) as caught, map_transport_errors(signal):
        raise httpx.ReadError("torn down")
    assert caught.value.reason == "interrupted"


def test_unknown_exception_is_provider_error_without_text() -> None:
    error = to_agent_error(ValueError("api_key=sk-123"))
    assert error == {
        "code": "provider_error",
        "message": "The provider failed (ValueError).",
        "retryable": False,
    }


def test_public_surfaces_are_pinned() -> None:
    expected_providers = {
        "AGENT_EVENT_PROTOCOL", "AbortError", "AbortSignal", "AgentEvent", "AgentProvider",
        "AgentProviderProtocolError", "AgentTransport", "Capabilities", "Command",
        "CommandableProvider", "OnEvent", "ProviderBase", "ProviderError", "RunContext",
        "RunOptions", "UnknownProviderKind", "WaitTimeout", "create_provider", "derive_history",
        "is_agent_provider", "known_kinds", "register_kind", "run_agent_provider",
        "standard_capabilities", "to_agent_error", "validate_agent_provider_events",
    }  # fmt: skip
    assert set(providers.__all__) == expected_providers
    assert set(providers.transports.__all__) == {
        "DEFAULT_MAX_CONNECTIONS", "DEFAULT_MAX_EVENT_BYTES", "ChannelTurn", "ChunkSource",
        "IterableTransport",
        "ReplayTransport", "SSEParser", "SSETransport", "UpstreamRequest", "WebSocketChannel",
        "WebSocketTransport", "abortable_sleep",
    }  # fmt: skip
    for name in providers.__all__:
        assert getattr(providers, name) is not None


def test_is_agent_provider_by_protocol_not_class() -> None:
    class Anything:
        protocol: ClassVar[dict[str, Any]] = {"name": "agent-event", "version": "0.1"}

    assert providers.is_agent_provider(Anything())
    assert not providers.is_agent_provider(object())


async def test_error_body_excerpt_is_redacted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {
            "error": "Incorrect API key provided: sk-proj-****abcd",
            "echo": request.headers["x-api-key"],
            "auth": request.headers["authorization"],
        }
        return httpx.Response(401, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    transport = SSETransport(client=client)
    headers = {"authorization": "Bearer tok_abcdef123", "x-api-key": "plainsecret42"}
    request = UpstreamRequest("http://up/x", json={}, headers=headers)
    with pytest.raises(UpstreamHTTPError) as caught:
        async for _ in transport.open(request, AbortSignal()):
            pass  # pragma: no cover
    body = caught.value.to_agent_error()["details"]["body"]
    assert "abcdef123" not in body and "plainsecret42" not in body and "sk-proj" not in body
    assert "[redacted]" in body
    assert caught.value.to_agent_error()["retryable"] is False
    await client.aclose()


def _response(reads: list[bytes], content_type: str, encoding: str | None = None) -> httpx.Response:
    headers = {"content-type": content_type}
    if encoding is not None:
        headers["content-encoding"] = encoding
    return httpx.Response(200, headers=headers, stream=ByteReads(reads))


async def _by_aiter_text(
    reads: list[bytes], content_type: str, encoding: str | None = None
) -> list[tuple[str, str, str]]:
    """The reference: httpx's own aiter_text() into the parser (what open_batches read)."""
    parser = SSEParser(1 << 20)
    out = []
    async for text in _response(reads, content_type, encoding).aiter_text():
        out += parser.feed(text)
    out += parser.close()
    return [(e.event, e.data, e.id) for e in out]


async def _by_transport(
    reads: list[bytes], content_type: str, encoding: str | None = None
) -> list[tuple[str, str, str]]:
    def handler(request: httpx.Request) -> httpx.Response:
        return _response(reads, content_type, encoding)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    transport = SSETransport(client=client)
    request = UpstreamRequest("http://up/x", json={}, max_event_bytes=1 << 20)
    out = [event async for event in transport.open(request, AbortSignal())]
    await client.aclose()
    return [(e.event, e.data, e.id) for e in out]


@settings(max_examples=120, deadline=None)
@given(
    datas=st.lists(st.text(alphabet="aé€😀\r\n:", max_size=8), max_size=6),
    tail=st.sampled_from([b"", b"data: x", b"data: \xe2\x82", b"\xff\n\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    content_type=st.sampled_from(
        ["text/event-stream", "text/event-stream; charset=utf-8", "text/plain; charset=latin-1"]
    ),
    encoding=st.sampled_from([None, "gzip", "deflate", "identity"]),
)
async def test_sse_transport_decodes_reads_as_aiter_text_does(
    datas: list[str], tail: bytes, cuts: list[int], content_type: str, encoding: str | None
) -> None:
    """Reads cut inside multi-byte characters, invalid bytes, an unterminated last frame, a
    declared charset, a compressed body: the transport's own decoding (the raw reads when
    nothing is content-encoded) gives what httpx's aiter_text gave."""
    body = b"".join(f"data: {d}\n\n".encode() for d in datas) + tail
    if encoding == "gzip":
        body = gzip.compress(body)
    elif encoding == "deflate":
        body = zlib.compress(body)
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    reads = [body[a:b] for a, b in itertools.pairwise(points) if body[a:b]]
    got = await _by_transport(reads, content_type, encoding)
    assert got == await _by_aiter_text(reads, content_type, encoding)
    if encoding is not None and datas:
        assert got  # decoded, not parsed from the compressed bytes


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1/chat/completions",
        "https://api.example.com:8443/openai/deployments/d/chat?api-version=2024-06-01&x=a%20b",
        "http://user:secret@upstream/v1/messages#ignored",
        "http://bücher.example/v1/x y",
        "http://[::1]:9/agent",
    ],
)
def test_a_parsed_upstream_url_builds_the_request_httpx_builds_from_the_string(url: str) -> None:
    from providers.transports.sse import upstream_url

    client = httpx.AsyncClient()
    mine = client.build_request("POST", upstream_url(url), json={"a": 1}, headers={"x-k": "v"})
    theirs = client.build_request("POST", url, json={"a": 1}, headers={"x-k": "v"})
    assert (mine.method, str(mine.url), mine.url.raw_path, mine.content) == (
        theirs.method,
        str(theirs.url),
        theirs.url.raw_path,
        theirs.content,
    )
    assert mine.headers.multi_items() == theirs.headers.multi_items()
    assert upstream_url(url) is upstream_url(url)  # parsed once


def test_an_invalid_upstream_url_raises_every_time_it_is_used() -> None:
    from providers.transports.sse import upstream_url

    for _ in range(2):  # an error is not cached as a result
        with pytest.raises(httpx.InvalidURL):
            upstream_url("http://[::1/agent")
