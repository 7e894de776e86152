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
from app.gc_policy import OLD_THRESHOLD, YOUNG_THRESHOLD, tune_for_serving
from app.server import GatewayServer
from tests.app.support.gateway_server import make_settings


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


def _full_collections_while_growing(old_threshold: int) -> int:
    """Full collections while 800,000 small objects are made and kept (a gateway's state and
    logs growing while answers stream), the young generation collected every 700 allocations
    (CPython's default: a smaller test) and the oldest considered after ``old_threshold``
    collections of the middle one."""
    full = 0

    def count(phase: str, info: dict[str, int]) -> None:
        nonlocal full
        if phase == "start" and info["generation"] == 2:
            full += 1

    gc.set_threshold(700, gc.get_threshold()[1], old_threshold)
    kept: list[list[int]] = []
    gc.callbacks.append(count)
    try:
        for n in range(800_000):
            kept.append([n])
    finally:
        gc.callbacks.remove(count)
    return full


@pytest.mark.usefixtures("restore_gc")
def test_full_collections_come_far_less_often_than_cpythons_default() -> None:
    """A full collection stops the loop for every stream (150+ ms with hundreds streaming):
    tuned, they come at least five times less often under the same allocations, and a cycle
    that reached the oldest generation is still reclaimed by one."""
    tune_for_serving()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, OLD_THRESHOLD)
    default = _full_collections_while_growing(10)  # CPython's
    tuned = _full_collections_while_growing(OLD_THRESHOLD)
    assert default >= 5, default
    assert tuned * 5 <= default, (tuned, default)
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    gc.collect(1)  # the cycle, still alive, moves to the oldest generation
    del a, b
    gc.collect(1)
    assert dead() is not None  # only a full collection reaches it
    gc.collect()
    assert dead() is None


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


@pytest.mark.only_backend(
    "memory", reason="which server tunes the collector depends on the server, not the backend"
)
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
