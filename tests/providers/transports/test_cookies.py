"""The shared upstream client keeps no cookies (``providers/transports/cookies.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from providers.signal import AbortSignal
from providers.transports import SSETransport, UpstreamRequest
from tests.loopback_asgi import serve_asgi


def _upstream_setting_a_cookie(seen: list[bytes | None]) -> Any:
    """An upstream that answers one SSE event and sets a cookie; ``seen`` gets the cookie
    header of each request (None: none sent)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen.append(dict(scope["headers"]).get(b"cookie"))
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"set-cookie", b"session=user-a-secret; Path=/"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: ok\n\n"})

    return app


async def test_the_shared_client_sends_no_cookie_an_earlier_run_was_given() -> None:
    """One client serves every user's runs: a cookie an upstream set in one run (a session, a
    load balancer's stickiness) must not go out with the next run's request."""
    seen: list[bytes | None] = []
    transport = SSETransport(max_connections=4)
    async with serve_asgi(_upstream_setting_a_cookie(seen), log_level="critical") as port:
        for _ in range(2):
            request = UpstreamRequest(f"http://127.0.0.1:{port}/run", json={})
            events = [e.data async for e in transport.open(request, AbortSignal())]
            assert events == ["ok"]
    assert seen == [None, None]
    assert len(transport._get_client().cookies.jar) == 0
    await transport.aclose()


async def test_no_response_is_parsed_for_cookies(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx's own ``Cookies.extract_cookies`` builds an ``email.message`` and a ``urllib``
    request per response before asking the jar: the shared client never calls it."""
    parsed: list[httpx.Response] = []

    def extract(self: httpx.Cookies, response: httpx.Response) -> None:
        parsed.append(response)

    monkeypatch.setattr(httpx.Cookies, "extract_cookies", extract)
    transport = SSETransport(max_connections=4)
    async with serve_asgi(_upstream_setting_a_cookie([]), log_level="critical") as port:
        request = UpstreamRequest(f"http://127.0.0.1:{port}/run", json={})
        assert [e.data async for e in transport.open(request, AbortSignal())] == ["ok"]
    client = transport._get_client()
    client.cookies = {"set": "by-hand"}  # kept by nobody either
    assert parsed == []
    assert len(client.cookies.jar) == 0
    await transport.aclose()
