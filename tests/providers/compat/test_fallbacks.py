"""Each internal the compat modules read, taken away (as an upgrade of httpx, httpcore, h11 or
Python would): one warning, and the gateway still serves runs of the three reference providers
(OpenAI Chat SSE, Anthropic Messages, AG-UI: loopback mock upstreams speaking their wire
formats) on the public path, an abort included, which closes the upstream connection."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

import h11
import httpcore
import httpx
import pytest

from providers.compat.asyncio_fast import ASYNCIO
from providers.compat.h11_fast import H11
from providers.compat.httpcore_fast import HTTPCORE
from providers.compat.httpx_fast import HTTPX
from providers.compat.probe import FastPath
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import wait_state
from tests.providers.support.mock_upstreams import (
    STALL,
    MockUpstream,
    agui_run,
    anthropic_frames,
    openai_frames,
    serve_mock,
)

Removal = Callable[[pytest.MonkeyPatch], str]


def without_name(module: str, name: str) -> Removal:
    """``module`` as its importers see it, without ``name`` (its own code keeps it)."""

    def remove(monkeypatch: pytest.MonkeyPatch) -> str:
        real = importlib.import_module(module)
        proxy = types.ModuleType(module)
        proxy.__dict__.update({k: v for k, v in vars(real).items() if k != name})
        monkeypatch.setitem(sys.modules, module, proxy)
        return f"{module}.{name}"

    return remove


def reshaped(owner: Any, attribute: str) -> Removal:
    """``owner.attribute`` replaced by a pass-through of another signature, which sets nothing
    itself (what the dependency does is unchanged; its shape, as a check sees it, is not)."""

    def remove(monkeypatch: pytest.MonkeyPatch) -> str:
        original = getattr(owner, attribute)

        def passthrough(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **kwargs)

        name = f"{owner.__qualname__}.{attribute}"
        passthrough.__qualname__ = name
        monkeypatch.setattr(owner, attribute, passthrough)
        return name

    return remove


def _module(name: str) -> Any:
    return importlib.import_module(name)


POOL = "httpcore._async.connection_pool"
HTTP11 = "httpcore._async.http11"

#: (package, removal) for every internal the compat modules list.
INTERNALS: dict[str, tuple[str, Removal]] = {
    "httpx BoundAsyncStream": ("httpx", without_name("httpx._client", "BoundAsyncStream")),
    "httpx BoundAsyncStream._stream": (
        "httpx",
        reshaped(_module("httpx._client").BoundAsyncStream, "__init__"),
    ),
    "httpx AsyncResponseStream": (
        "httpx",
        without_name("httpx._transports.default", "AsyncResponseStream"),
    ),
    "httpx AsyncResponseStream._httpcore_stream": (
        "httpx",
        reshaped(_module("httpx._transports.default").AsyncResponseStream, "__init__"),
    ),
    "httpx AsyncHTTPTransport._pool": ("httpx", reshaped(httpx.AsyncHTTPTransport, "__init__")),
    "httpcore pool._assign_requests_to_connections": (
        "httpcore",
        reshaped(httpcore.AsyncConnectionPool, "_assign_requests_to_connections"),
    ),
    "httpcore pool attributes": ("httpcore", reshaped(httpcore.AsyncConnectionPool, "__init__")),
    "httpcore AsyncPoolRequest": ("httpcore", without_name(POOL, "AsyncPoolRequest")),
    "httpcore AsyncPoolRequest.is_queued": (
        "httpcore",
        reshaped(_module(POOL).AsyncPoolRequest, "is_queued"),
    ),
    "httpcore AsyncPoolRequest.assign_to_connection": (
        "httpcore",
        reshaped(_module(POOL).AsyncPoolRequest, "assign_to_connection"),
    ),
    "httpcore AsyncHTTPConnection": (
        "httpcore",
        without_name("httpcore._async.connection", "AsyncHTTPConnection"),
    ),
    "httpcore AsyncHTTPConnection attributes": (
        "httpcore",
        reshaped(_module("httpcore._async.connection").AsyncHTTPConnection, "__init__"),
    ),
    "httpcore AsyncHTTP11Connection": ("httpcore", without_name(HTTP11, "AsyncHTTP11Connection")),
    "httpcore AsyncHTTP11Connection attributes": (
        "httpcore",
        reshaped(_module(HTTP11).AsyncHTTP11Connection, "__init__"),
    ),
    "httpcore AsyncLock": ("httpcore", without_name("httpcore._synchronization", "AsyncLock")),
    "httpcore AsyncLock._backend": (
        "httpcore",
        reshaped(_module("httpcore._synchronization").AsyncLock, "__init__"),
    ),
    "httpcore AsyncLock._anyio_lock": (
        "httpcore",
        reshaped(_module("httpcore._synchronization").AsyncLock, "setup"),
    ),
    "httpcore PoolByteStream": ("httpcore", without_name(POOL, "PoolByteStream")),
    "httpcore PoolByteStream._stream": (
        "httpcore",
        reshaped(_module(POOL).PoolByteStream, "__init__"),
    ),
    "httpcore HTTP11ConnectionByteStream": (
        "httpcore",
        without_name(HTTP11, "HTTP11ConnectionByteStream"),
    ),
    "httpcore HTTP11ConnectionByteStream attributes": (
        "httpcore",
        reshaped(_module(HTTP11).HTTP11ConnectionByteStream, "__init__"),
    ),
    "h11 Connection attributes": ("h11", reshaped(h11.Connection, "__init__")),
    "h11 ChunkedReader": ("h11", without_name("h11._readers", "ChunkedReader")),
    "h11 ChunkedReader attributes": (
        "h11",
        reshaped(_module("h11._readers").ChunkedReader, "__init__"),
    ),
    # Without it every idle upstream connection counts as readable: closed, not reused.
    "asyncio StreamReader._buffer": ("asyncio", reshaped(asyncio.StreamReader, "__init__")),
}


@pytest.fixture
def checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compat modules check their internals again at the next use (restored after)."""
    for path in (HTTPX, HTTPCORE, H11, ASYNCIO):
        monkeypatch.setattr(path, "_checked", False)
        monkeypatch.setattr(path, "_internals", None)


# The three wire formats: a whole answer, then one stalled mid-stream (aborted).
PROVIDERS: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "openai": (
        {"kind": "openai-chat", "model": "mock"},
        [openai_frames(text="Hello there"), [*openai_frames(text="Hello there")[:2], STALL]],
    ),
    "anthropic": (
        {"kind": "anthropic-messages", "model": "mock", "headers": {"x-api-key": "k"}},
        [anthropic_frames(text="Hello there"), [*anthropic_frames(text="Hello there")[:4], STALL]],
    ),
    "agui": (
        {"kind": "ag-ui"},
        [
            lambda body: agui_run(body, text="Hello there"),
            lambda body: [*agui_run(body, text="Hello there")[:3], STALL],
        ],
    ),
}


def last_answer(state: dict[str, Any]) -> tuple[str, str]:
    message = state["messages"][-1]
    return str(message["message"]["content"]), message["status"]


async def serve_runs(start_gateway: StartGateway, **gateway: Any) -> None:
    """One whole run and one aborted run per provider, each against its mock upstream."""
    mocks: dict[str, MockUpstream] = {}
    contexts = {name: serve_mock(responses) for name, (_, responses) in PROVIDERS.items()}
    for name, context in contexts.items():
        mocks[name] = await context.__aenter__()
    try:
        providers = {
            name: {**config, "url": mocks[name].url} for name, (config, _) in PROVIDERS.items()
        }
        gw = await start_gateway(make_settings(gateway=gateway, providers=providers))
        async with gw.client() as client:
            for name, mock in mocks.items():
                key = f"c-{name}"
                body = {"input": {"prompt": "Hi"}, "provider": name}
                answer = await client.post(f"/v1/conversations/{key}/runs", json=body)
                assert answer.status_code == 202, answer.text
                state = await wait_state(client, key, lambda s: not s["isRequesting"])
                assert last_answer(state) == ("Hello there", "success"), state["messages"]
                answer = await client.post(f"/v1/conversations/{key}/runs", json=body)
                assert answer.status_code == 202, answer.text
                await wait_state(
                    client, key, lambda s: s["isRequesting"] and "Hello" in str(s["messages"][-1])
                )
                aborted = await client.post(f"/v1/conversations/{key}/abort", json={})
                assert aborted.status_code == 202, aborted.text
                await asyncio.wait_for(mock.disconnected.wait(), 10)
                state = await wait_state(client, key, lambda s: not s["isRequesting"])
                assert last_answer(state) == ("Hello", "abort"), state["messages"]
                assert mock.disconnects == 1
        await gw.stop()
    finally:
        for context in contexts.values():
            await context.__aexit__(None, None, None)


@pytest.mark.parametrize("internal", list(INTERNALS))
async def test_without_an_internal_the_gateway_serves_runs_on_the_public_path(
    internal: str,
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    checked_again: None,
) -> None:
    package, remove = INTERNALS[internal]
    removed = remove(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        await serve_runs(start_gateway)
    warnings = [r.getMessage() for r in caplog.records if r.name == "providers.compat"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"{package}'s internals differ") and removed in warnings[0]
    fast: dict[str, FastPath[Any]] = {
        "httpx": HTTPX,
        "httpcore": HTTPCORE,
        "h11": H11,
        "asyncio": ASYNCIO,
    }
    assert fast[package].internals() is None
    assert all(path.internals() is not None for name, path in fast.items() if name != package)


async def test_with_every_internal_in_place_nothing_is_warned_and_runs_are_served(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture, checked_again: None
) -> None:
    with caplog.at_level(logging.WARNING, logger="providers.compat"):
        await serve_runs(start_gateway)
    assert [r for r in caplog.records if r.name == "providers.compat"] == []
    assert None not in (HTTPX.internals(), HTTPCORE.internals(), H11.internals())
    assert ASYNCIO.internals() is True


async def test_fast_paths_off_serves_runs_without_reading_an_internal(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch, checked_again: None
) -> None:
    def unexpected(problems: list[str]) -> None:
        raise AssertionError("an internal was read with fast_paths = false")

    for path in (HTTPX, HTTPCORE, H11, ASYNCIO):
        monkeypatch.setattr(path, "_check", unexpected)
    await serve_runs(start_gateway, fast_paths=False)
