"""``SSEParser``'s whole-frames path (reads of complete ``data: …`` frames) reads exactly what
httpx-sse's decoders read, whatever the reads mix in (other fields, comments, CRLF, multi-line
events, oversized frames) and however the stream is cut into reads."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from providers.errors import UpstreamEventTooLarge, UpstreamMalformedChunk
from providers.transports.sse import SSEParser
from tests.providers.support.helpers import OracleSSEParser

DATA = st.text(alphabet='ab{}":, \x00é', max_size=24)

#: Mostly whole data frames, with every other shape an upstream may interleave.
PIECES = st.one_of(
    DATA.map(lambda d: f"data: {d}\n\n"),
    DATA.map(lambda d: f"data: {d}\n\n"),
    DATA.map(lambda d: f"data: {d}\n\n"),
    st.sampled_from(
        [
            "event: x\n",
            "id: 7\n",
            "retry: 5\n",
            ": keep-alive\n",
            ": keep-alive\n\n",
            "data: a\ndata: b\n\n",
            "data:a\n\n",
            "data: [DONE]\n\n",
            "data: a\r\n\r\n",
            "\n\n",
            "\n",
            "data: " + "x" * 80 + "\n\n",
            "data: ",
            "other: v\n",
        ]
    ),
)


def _parse(parser: Any, reads: list[str]) -> list[tuple[Any, ...]] | str:
    out = []
    try:
        for read in reads:
            out.extend(parser.feed(read))
        out.extend(parser.close())
    except (UpstreamEventTooLarge, OverflowError):  # the oracle's "too large"
        return "too-large"
    except (UpstreamMalformedChunk, ValueError):  # the oracle's "malformed"
        return "malformed"
    return [(e.event, e.data, e.id, e.retry) for e in out]


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(PIECES, max_size=20),
    groups=st.lists(st.integers(min_value=1, max_value=5), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=3),
    limit=st.sampled_from([16, 64, 4096]),
    strict=st.booleans(),
)
def test_whole_frame_reads_parse_as_httpx_sse_does(
    pieces: list[str], groups: list[int], cuts: list[int], limit: int, strict: bool
) -> None:
    # Reads of whole pieces (the whole-frames path's case), a few then cut anywhere.
    reads: list[str] = []
    rest = list(pieces)
    for size in groups:
        if rest:
            reads.append("".join(rest[:size]))
            rest = rest[size:]
    if rest:
        reads.append("".join(rest))
    text = "".join(reads)
    for cut in cuts:
        point = cut % (len(text) + 1)
        at = 0
        for number, read in enumerate(reads):
            if at < point < at + len(read):
                reads[number : number + 1] = [read[: point - at], read[point - at :]]
                break
            at += len(read)
    reads = [read for read in reads if read]
    expected = _parse(OracleSSEParser(limit, strict_fields=strict), reads)
    assert _parse(SSEParser(limit, strict_fields=strict), reads) == expected


def test_a_read_of_whole_frames_gives_one_event_per_frame() -> None:
    parser = SSEParser(4096)
    parser.feed("id: 3\n\n")
    events = parser.feed('data: {"a":1}\n\ndata: \n\ndata: [DONE]\n\n')
    assert [(e.event, e.data, e.id, e.retry) for e in events] == [
        ("message", '{"a":1}', "3", None),
        ("message", "", "3", None),
        ("message", "[DONE]", "3", None),
    ]


def test_a_frame_over_the_limit_still_raises() -> None:
    parser = SSEParser(16)
    assert len(parser.feed("data: short\n\n")) == 1
    try:
        parser.feed("data: " + "x" * 20 + "\n\n")
    except UpstreamEventTooLarge:
        return
    raise AssertionError("an oversized frame was read")
