"""The plain-chunk decoder (``providers.transports.chunked``) and the direct body read that
uses it: for any chunked body, split into reads anywhere, cut short or corrupted anywhere, the
same bytes, the same error and the same end state as h11 reading the same reads alone."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from typing import Any

import h11
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.compat.h11_fast import H11
from providers.transports.chunked import INCOMPLETE, ChunkDecoder, ChunkFramingError
from providers.transports.http11_body import _body
from tests.providers.transports.test_http11_body import HEAD, chunk


class Reads:
    """A network stream that returns the given reads, then EOF."""

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = list(reads)

    # httpcore's network stream's signature, which _body calls.
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return self._reads.pop(0) if self._reads else b""


def response_state(with_head: bytes = b"") -> h11.Connection:
    """An h11 client connection that sent its request and read the response's head, and
    ``with_head``: body bytes that came in the same read (h11 holds them, unread)."""
    state = h11.Connection(h11.CLIENT)
    state.send(h11.Request(method="POST", target="/", headers=[("host", "upstream")]))
    state.send(h11.EndOfMessage())
    state.receive_data(HEAD + with_head)
    assert isinstance(state.next_event(), h11.Response)
    return state


async def direct(reads: list[bytes], state: h11.Connection) -> tuple[bytes, str | None]:
    """The body through ``_body``: its bytes and the error it ended with (a class name)."""
    got: list[bytes] = []
    try:
        async for item in _body(state, Reads(reads), 65536, None):
            got.append(item)
    except httpx.HTTPError as error:
        return b"".join(got), type(error).__name__
    return b"".join(got), None


def h11_alone(reads: list[bytes], with_head: bytes = b"") -> tuple[bytes, str | None, Any]:
    """The same reads through h11 only (httpcore's loop): bytes, error, h11's end state."""
    state = response_state(with_head)
    got: list[bytes] = []
    pending = list(reads)
    while True:
        try:
            event = state.next_event()
        except h11.RemoteProtocolError:
            return b"".join(got), "RemoteProtocolError", state.their_state
        if type(event) is h11.Data:
            got.append(bytes(event.data))
        elif event is h11.NEED_DATA:
            state.receive_data(pending.pop(0) if pending else b"")
        else:
            assert type(event) is h11.EndOfMessage
            return b"".join(got), None, state.their_state


def size_line(size: int, style: int) -> bytes:
    """A chunk-size line: plain, upper-case, zero-padded, with an extension, or with OWS."""
    digits = b"%x" % size
    return [
        digits,
        digits.upper(),
        b"000" + digits,
        digits + b";name=value",
        digits + b" ",
    ][style] + b"\r\n"


@st.composite
def chunked_body(draw: Callable[..., Any]) -> tuple[bytes, bytes]:
    """A chunked body: (its wire bytes, the body bytes it carries)."""
    datas = draw(st.lists(st.binary(min_size=1, max_size=300), max_size=12))
    wire = b""
    for data in datas:
        style = draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4]))
        wire += size_line(len(data), style) + data + b"\r\n"
    wire += draw(st.sampled_from([b"0\r\n\r\n", b"0;end\r\n\r\n", b"0\r\nx-trailer: 1\r\n\r\n"]))
    return wire, b"".join(datas)


def split(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(wire) + 1) for cut in cuts} | {0, len(wire)})
    return [wire[a:b] for a, b in itertools.pairwise(points) if b > a]


def outcome(reads: list[bytes], with_head: bytes = b"") -> tuple[bytes, str | None, Any]:
    state = response_state(with_head)
    got, error = asyncio.run(direct(reads, state))
    return got, error, state.their_state


@settings(deadline=None, max_examples=300)
@given(chunked_body(), st.lists(st.integers(min_value=0), max_size=20))
def test_any_body_split_anywhere_reads_whole_and_leaves_h11_done(
    body: tuple[bytes, bytes], cuts: list[int]
) -> None:
    wire, data = body
    reads = split(wire, cuts)
    assert outcome(reads) == (data, None, h11.DONE)
    assert h11_alone(reads) == (data, None, h11.DONE)


@settings(deadline=None, max_examples=200)
@given(chunked_body(), st.lists(st.integers(min_value=0), max_size=20), st.integers(min_value=0))
def test_a_body_begun_in_the_read_of_the_head_reads_whole(
    body: tuple[bytes, bytes], cuts: list[int], at: int
) -> None:
    """h11 reads what came with the head (perhaps stopping inside a chunk or a size line);
    the decoder takes over at the first boundary where h11 holds nothing."""
    wire, data = body
    first = at % (len(wire) + 1)
    reads = split(wire[first:], cuts)
    assert outcome(reads, wire[:first]) == (data, None, h11.DONE)


@settings(deadline=None, max_examples=300)
@given(chunked_body(), st.lists(st.integers(min_value=0), max_size=8), st.integers(min_value=0))
def test_a_body_cut_short_anywhere_ends_as_with_h11(
    body: tuple[bytes, bytes], cuts: list[int], at: int
) -> None:
    wire, _ = body
    cut = wire[: at % len(wire)]
    reads = split(cut, cuts)
    got, error, state = outcome(reads)
    assert (got, error) == h11_alone(reads)[:2]
    assert error == "RemoteProtocolError"
    assert state is not h11.DONE  # the connection is not reused


@settings(deadline=None, max_examples=300)
@given(
    chunked_body(),
    st.lists(st.integers(min_value=0), max_size=8),
    st.integers(min_value=0),
    st.integers(min_value=0, max_value=255),
)
def test_a_body_with_any_byte_changed_ends_as_with_h11(
    body: tuple[bytes, bytes], cuts: list[int], at: int, byte: int
) -> None:
    wire, _ = body
    position = at % len(wire)
    changed = wire[:position] + bytes([byte]) + wire[position + 1 :]
    reads = split(changed, cuts)
    got, error, state = outcome(reads)
    alone = h11_alone(reads)
    assert (got, error) == alone[:2]
    assert (state is h11.DONE) == (alone[2] is h11.DONE)


def plain_chunks_in_reads(n: int) -> list[bytes]:
    """``n`` one-event chunks in reads of 37 bytes, then the last chunk."""
    datas = [b"data: %d\n\n" % i for i in range(n)]
    wire = b"".join(map(chunk, datas))
    return [wire[i : i + 37] for i in range(0, len(wire), 37)] + [b"0\r\n\r\n"]


def h11_events_counted(state: h11.Connection) -> list[int]:
    """``state.next_event`` from now on counts its calls in the returned one-item list."""
    calls = [0]
    next_event = state.next_event

    def counted() -> Any:
        calls[0] += 1
        return next_event()

    state.next_event = counted  # type: ignore[method-assign]
    return calls


def test_plain_chunks_are_not_decoded_by_h11() -> None:
    """The point of the decoder: h11 sees the response head and the last chunk, no other."""
    state = response_state()
    calls = h11_events_counted(state)
    got, error = asyncio.run(direct(plain_chunks_in_reads(100), state))
    assert error is None and got.count(b"data: ") == 100
    assert calls[0] <= 3  # NEED_DATA once, then the last chunk's EndOfMessage
    assert state.their_state is h11.DONE


def test_each_read_is_one_item_with_the_chunks_it_completed_or_began() -> None:
    decoder = ChunkDecoder()
    assert decoder.feed(b"5\r\nhello\r\n3\r\nab") == ([b"hello", b"ab"], None)
    assert not decoder.at_boundary
    assert decoder.feed(b"c\r") == ([b"c"], None)
    assert decoder.feed(b"\n1") == ([], None)  # a size line begun
    assert decoder.at_boundary
    assert decoder.feed(b"0\r\n" + b"x" * 16) == ([b"x" * 16], None)
    assert decoder.feed(b"\r\n2;ext\r\nhi\r\n") == ([], b"2;ext\r\nhi\r\n")


def test_the_last_chunk_and_any_header_it_does_not_take_are_handed_back_whole() -> None:
    assert ChunkDecoder().feed(b"1\r\na\r\n0\r\n\r\n") == ([b"a"], b"0\r\n\r\n")
    assert ChunkDecoder().feed(b"zz\r\n") == ([], b"zz\r\n")
    assert ChunkDecoder().feed(b"1" * 17 + b"\r\n") == ([], b"1" * 17 + b"\r\n")
    decoder = ChunkDecoder()
    assert decoder.feed(b"a") == ([], None)
    assert decoder.feed(b"; x") == ([], b"a; x")


def test_a_framing_error_inside_a_chunk_keeps_the_bytes_before_it() -> None:
    decoder = ChunkDecoder()
    with pytest.raises(ChunkFramingError, match="malformed chunk footer") as raised:
        decoder.feed(b"2\r\nok\r\n3\r\nabcXY")
    assert raised.value.pieces == [b"ok", b"abc"]
    decoder = ChunkDecoder()
    decoder.feed(b"4\r\nab")
    with pytest.raises(ChunkFramingError, match="incomplete chunked read") as raised:
        decoder.end()
    assert str(raised.value) == INCOMPLETE
    decoder = ChunkDecoder()
    decoder.feed(b"4\r\nabcd\r\n1f")
    assert decoder.end() == b"1f"  # at a boundary: h11 reads the EOF after these bytes


def test_an_h11_of_another_shape_reads_the_body_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without h11's ChunkedReader as this h11 has it, the fast path stays off: same bytes."""
    monkeypatch.setitem(sys.modules, "h11._readers", None)  # an h11 without that module
    monkeypatch.setattr(H11, "_checked", False)  # checked again (restored after the test)
    monkeypatch.setattr(H11, "_internals", None)
    state = response_state()
    calls = h11_events_counted(state)
    reads = plain_chunks_in_reads(20)
    got, error = asyncio.run(direct(reads, state))
    assert (got, error) == (h11_alone(reads)[0], None)
    assert got.count(b"data: ") == 20 and state.their_state is h11.DONE
    assert calls[0] > 20  # h11 decoded every chunk
