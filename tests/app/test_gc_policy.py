"""The serving process's GC policy: start-up objects frozen, garbage made later still collected,
and only a server that owns its process tunes the collector."""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref
from collections.abc import Iterator

import pytest
import uvicorn

import app.server
from app.factory import create_app
from app.gc_policy import YOUNG_THRESHOLD, tune_for_serving
from app.server import GatewayServer
from tests.app.gateway_server import make_settings


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.mark.usefixtures("restore_gc")
def test_tuning_freezes_startup_objects_and_still_collects_later_cycles() -> None:
    survivor = _Node()
    tune_for_serving()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    # A reference cycle made after start-up (a run's garbage) is still reclaimed.
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    del a, b
    gc.collect()
    assert dead() is None
    assert isinstance(survivor, _Node)  # what was alive at start-up is untouched


async def _serve_once(server: GatewayServer) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@pytest.mark.parametrize(
    ("kwargs", "tuned"),
    [
        ({"install_signal_handlers": False}, 0),  # in-process (tests): collector left alone
        ({}, 1),  # owns its process (`agent-gateway serve`, the bench's servers)
        ({"install_signal_handlers": False, "tune_gc": True}, 1),
    ],
)
async def test_only_a_server_owning_its_process_tunes_the_collector(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, bool], tuned: int
) -> None:
    calls: list[None] = []
    monkeypatch.setattr(app.server, "tune_for_serving", lambda: calls.append(None))
    config = uvicorn.Config(create_app(make_settings()), log_level="warning", lifespan="on")
    await _serve_once(GatewayServer(config, **kwargs))
    assert len(calls) == tuned
