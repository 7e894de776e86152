"""``POST …/runs``: its fast path answers every request exactly as FastAPI's general path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.api import http
from app.api.routes import conversations
from app.api.routes.conversations import well_formed_start
from app.api.schemas import RunBody
from tests.app.support.gateway_server import RunningGateway, make_settings, start_server
from tests.app.support.scripted_provider import ScriptedProvider

_ONLY_MEMORY = pytest.mark.only_backend(
    "memory", reason="the fast path only parses the request; the backend sees the same calls"
)
_KEY_CHARS = "abcXYZ019._:-"
_BODIES = [
    {"input": {"prompt": "text:1"}},
    {"input": {"prompt": "text:2"}, "provider": "demo"},
    {"input": {"prompt": "text:1"}, "provider": "nope"},
    {"input": {"prompt": "text:1"}, "multitask": "enqueue", "extra": [1, 2]},
    {"input": {"prompt": "text:1"}, "multitask": "sometimes"},
    {"input": {"prompt": 5}},
    {"input": {"content": [{"type": "text", "text": "hi"}]}},
    {"input": "text:1"},
    {"input": None},
    {"provider": "demo"},
    {"input": {"prompt": "text:1"}, "provider": 7},
    [1, 2],
    "text",
]
_RAW_BODIES = [b"", b"{", b"null", b"\xff\xfe{}", b"[" * 3000 + b"]" * 3000]
_STREAMS = [None, "true", "false", "1", "yes", "maybe", ""]


@st.composite
def start_requests(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    """A key (valid or not), a query string, a body and headers of a ``POST …/runs``."""
    key = draw(
        st.one_of(
            st.text(_KEY_CHARS, min_size=1, max_size=12),
            st.sampled_from(["bad key", "x" * 129, "é", "a" * 128]),
        )
    )
    stream = draw(st.sampled_from(_STREAMS))
    query = "" if stream is None else f"?stream={stream}"
    if draw(st.booleans()):
        query += ("&" if query else "?") + "other=1"
    body = draw(st.one_of(st.sampled_from(_BODIES).map(orjson.dumps), st.sampled_from(_RAW_BODIES)))
    headers = {"content-type": "application/json"}
    idempotency = draw(st.sampled_from([None, "", "k1", "k2"]))
    if idempotency is not None:
        headers["idempotency-key"] = idempotency
    return key, query, body, headers


def _normalized(response: httpx.Response) -> Any:
    """What must be identical between the two paths: status, and the body without its ids."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            orjson.loads(line[6:])
            for line in response.text.splitlines()
            if line.startswith("data: ")
        ]
        return response.status_code, "X-Run-Id" in response.headers, [e["type"] for e in events]
    body = response.json()
    if response.status_code == 202:
        body = {k: v for k, v in body.items() if k not in ("runId", "sessionId", "cursor")}
    return response.status_code, body


async def _send_all(
    gw: RunningGateway, cases: list[tuple[str, str, bytes, dict[str, str]]], fast: bool
) -> list[Any]:
    http.FAST_PATHS_ENABLED = fast
    answers = []
    try:
        async with gw.client() as client:
            for index, (key, query, body, headers) in enumerate(cases):
                url = f"/v1/conversations/{index}{key}/runs{query}"
                response = await client.post(url, content=body, headers=headers)
                answers.append(_normalized(response))
    finally:
        http.FAST_PATHS_ENABLED = True
    return answers


def _counting_fast_path(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per request, whether the fast path answered it (True) or left it to FastAPI."""
    answered: list[bool] = []

    def counting(key: str, stream: str | None, body: bytes) -> tuple[RunBody, bool] | None:
        parsed = well_formed_start(key, stream, body)
        answered.append(parsed is not None)
        return parsed

    monkeypatch.setattr(conversations, "well_formed_start", counting)
    return answered


async def _on_two_gateways(
    check: Callable[[RunningGateway, RunningGateway], Awaitable[None]],
) -> None:
    settings_ = make_settings(auth={"mode": "bearer", "tokens": {"t1": "alice"}})
    gateways = [
        await start_server(settings_, providers={"demo": ScriptedProvider()}) for _ in range(2)
    ]
    try:
        await check(*gateways)
    finally:
        for gw in gateways:
            await gw.stop()


@_ONLY_MEMORY
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # No shrinking: each example starts two gateways (a failure prints its cases all the same).
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(cases=st.lists(start_requests(), min_size=1, max_size=6), token=st.sampled_from(["t1", "x"]))
def test_fast_path_answers_as_the_general_path(
    cases: list[tuple[str, str, bytes, dict[str, str]]], token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _, _, _, headers in cases:
        headers["authorization"] = f"Bearer {token}"

    async def check(fast_gw: RunningGateway, general_gw: RunningGateway) -> None:
        with monkeypatch.context() as patch:
            answered = _counting_fast_path(patch)
            fast = await _send_all(fast_gw, cases, fast=True)
        general = await _send_all(general_gw, cases, fast=False)
        assert fast == general
        # With a good token every request reached the fast path first; a wrong token is
        # answered 401 before the body is read (app/api/http.py), fast path or not.
        assert len(answered) == (len(cases) if token == "t1" else 0)

    asyncio.run(_on_two_gateways(check))


@_ONLY_MEMORY
async def test_a_well_formed_start_is_answered_by_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gw = await start_server(make_settings(), providers={"demo": ScriptedProvider()})
    answered = _counting_fast_path(monkeypatch)
    try:
        async with gw.client() as client:
            response = await client.post(
                "/v1/conversations/c1/runs", json={"input": {"prompt": "text:1"}}
            )
            assert response.status_code == 202
            stream = await client.post(
                "/v1/conversations/c2/runs?stream=true", json={"input": {"prompt": "text:1"}}
            )
            assert stream.status_code == 200
            types = [
                orjson.loads(line[6:])["type"]
                for line in stream.text.splitlines()
                if line.startswith("data: ")
            ]
            assert types[:2] == ["session.started", "run.started"]
            assert types[-1] == "run.completed"
            bad = await client.post("/v1/conversations/c3/runs", json={"input": "x"})
            assert bad.status_code == 422
    finally:
        await gw.stop()
    assert answered == [True, True, False]


@pytest.mark.parametrize(
    ("key", "stream", "body", "expected"),
    [
        ("c1", None, b'{"input": {"prompt": "p"}}', False),
        ("c1", "true", b'{"input": {"prompt": "p"}, "x": 1}', True),
        ("c1", "yes", b'{"input": {"prompt": "p"}}', None),  # FastAPI's spelling: its answer
        ("c 1", None, b'{"input": {"prompt": "p"}}', None),
        ("c" * 129, None, b'{"input": {"prompt": "p"}}', None),
        ("c1", None, b"", None),
        ("c1", None, b"{", None),
        ("c1", None, b'{"input": "p"}', None),
    ],
)
def test_well_formed_start_defers_every_doubtful_request(
    key: str, stream: str | None, body: bytes, expected: bool | None
) -> None:
    parsed = well_formed_start(key, stream, body)
    assert (None if parsed is None else parsed[1]) == expected
    if parsed is not None:
        assert parsed[0].input == {"prompt": "p"}
